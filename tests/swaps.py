"""Another process replacing a folder while a command reads it, at a fixed point of the reading."""

#: A Python script that runs a console command (``module:function`` in argv[1], its argv after
#: argv[2]) and, at the first open of a file under argv[2]/data/, swaps argv[2] for argv[2].next as a
#: ``pack --force`` would: the old folder renamed aside, the new one renamed in.
SWAPPED_MID_READ = """
import importlib, os, sys

module, _, function = sys.argv[1].partition(":")
folder, swapped = sys.argv[2], []


def hook(event, args):
    if event == "open" and not swapped and isinstance(args[0], str) and args[0].startswith(folder + "/data/"):
        swapped.append(True)
        os.rename(folder, folder + ".old")
        os.rename(folder + ".next", folder)


sys.addaudithook(hook)
sys.exit(getattr(importlib.import_module(module), function)(sys.argv[3:]))
"""
