"""``python -m calipers`` is the same command as ``calipers``."""

from calipers.cli import main

if __name__ == "__main__":
    main()
