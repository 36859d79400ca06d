import os

# Nothing in the tests may reach a hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
