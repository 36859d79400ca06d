"""How every package reads a file a user hands it (laya_protocol.files), on real files of each kind."""

import os

import pytest

from laya_protocol.files import Refused, parse_json, read_capped

from ..promises import returns_within


def test_a_fifo_is_refused_by_its_kind_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "meta.json"
    os.mkfifo(fifo)

    def read():
        with pytest.raises(Refused, match="not a regular file"):
            read_capped(fifo, 1 << 20)
        return True

    assert returns_within(30, read, [fifo]) == (True, True)


def test_a_file_is_refused_by_its_size_before_it_is_read_and_a_device_by_its_kind(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b"1" * 1001)
    with pytest.raises(Refused) as e:
        read_capped(big, 1000)
    assert e.value.size == 1001
    assert read_capped(big, 1001) == b"1" * 1001
    with pytest.raises(Refused, match="not a regular file"):
        read_capped("/dev/zero", 1000)


def test_a_file_that_says_it_is_empty_is_read_only_up_to_the_cap():
    text = read_capped("/proc/self/status", 1 << 20)  # /proc says 0 bytes and holds more
    assert text.startswith(b"Name:")
    with pytest.raises(Refused) as e:
        read_capped("/proc/self/status", 10)
    assert e.value.size == 11, "one byte past the cap is read, no more"


@pytest.mark.parametrize(
    "data,why",
    [
        (b'{"a": 1, "a": 2}', "key 'a' given twice"),
        (b"\xff", "not UTF-8 at byte 0"),
        (b"[" * 100_000, "not JSON"),
        (b"9" * 5000, "not JSON"),
    ],
)
def test_json_is_plain_json_or_refused_on_one_line(data, why):
    with pytest.raises(Refused, match=why) as e:
        parse_json(data)
    assert "\n" not in str(e.value)
