"""``python -m autotune`` (what ``torchrun -m autotune train ...`` runs)."""

from autotune.cli.main import main

if __name__ == "__main__":
    main()
