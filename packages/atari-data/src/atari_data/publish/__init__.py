"""Publishing: packing a layout into a Hub repository, its card, doctor, the Hub, replay packs."""
