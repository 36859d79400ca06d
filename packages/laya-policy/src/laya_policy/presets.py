"""What a policy is built from, by name, without torch: the VLM presets and SmolVLM's Hub id, and the
reference CNN's name, inputs and frame sizes. The command line's options and help are written from
these, so `laya-policy --help` and a refused flag answer before torch is imported (3-4 s on
two CPU cores); the modules that build the models import them from here.
"""

from __future__ import annotations

from dataclasses import dataclass

SMOLVLM = "HuggingFaceTB/SmolVLM-256M-Instruct"


PRESET_IMAGE_SIZE = 128  # a preset's frame side when none is asked for: the tiny VLM's CPU budget


@dataclass(frozen=True)
class TinySize:
    """The shapes of a random Idefics3 built here."""

    image_size: int = PRESET_IMAGE_SIZE
    patch_size: int = 16  # SigLIP's, in pixels
    scale_factor: int = 4  # pixel shuffle: (image_size / patch_size)^2 / scale_factor^2 image tokens per frame
    vision_hidden: int = 64
    vision_layers: int = 2
    vision_heads: int = 4
    vision_intermediate: int = 128
    text_hidden: int = 128
    text_layers: int = 2
    text_heads: int = 4
    text_kv_heads: int = 4
    text_intermediate: int = 256

    @property
    def token_side(self) -> int:
        """The pixels one image token spans: a patch, merged scale x scale (what --image-size is a multiple of)."""
        return self.patch_size * self.scale_factor


#: SmolVLM-256M's shapes (SigLIP base with 16-pixel patches, a 30-layer 576-wide Llama) with random
#: weights, at the preset frame side unless built for another (SmolVLM's own is 512): what GPU
#: benchmarks time without downloading anything.
SMOLVLM_SHAPES = TinySize(
    vision_hidden=768,
    vision_layers=12,
    vision_heads=12,
    vision_intermediate=3072,
    text_hidden=576,
    text_layers=30,
    text_heads=9,
    text_kv_heads=3,
    text_intermediate=1536,
)
PRESETS = {"tiny": TinySize(), "random-smolvlm": SMOLVLM_SHAPES}

CNN = "cnn"  # the backbone name of the reference CNN (laya_policy.cnn), and the stem of its weights file
MOTION_GAIN = 4.0  # the motion channel's scale against the frame's (both are linear in the frames)
MOTION, FRAMES = "motion", "frames"  # FRAMES: each frame as its own channel, the form of older checkpoints
INPUTS = (MOTION, FRAMES)
CNN_IMAGE_SIZE = 84  # the Nature CNN's frame side (Mnih et al., 2015)
CNN_SIZES = (36, 256)  # the convolutions need 36 pixels; at 256 the 512-unit layer already holds 26M weights


def takes_motion(inputs: str, frames: int) -> bool:
    """Whether the CNN's input channels are the newest frame and its motion (else each frame as it is)."""
    return inputs == MOTION and frames > 1


def check_size(size: int, named: str = "--image-size") -> None:
    """Refuse a CNN frame side outside ``CNN_SIZES``; ``named`` says where it was given."""
    if not CNN_SIZES[0] <= size <= CNN_SIZES[1]:
        raise ValueError(f"{named} {size}: the cnn takes {CNN_SIZES[0]} to {CNN_SIZES[1]} pixels")
