import atexit
import os
import shutil
import tempfile

# Nothing in the tests may reach a hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
# `datasets` caches what it loads; keep the tests' caches out of the user's home, and remove them after.
_cache = tempfile.mkdtemp(prefix="hf-datasets-cache-")
os.environ["HF_DATASETS_CACHE"] = _cache
atexit.register(shutil.rmtree, _cache, True)
