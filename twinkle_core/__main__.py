"""``python -m twinkle_core`` runs the ``twinkle`` CLI."""

from twinkle_core.cli import main

if __name__ == "__main__":
    main()
