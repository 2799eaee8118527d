"""``python -m gearjax`` runs the built-in demo."""

from gearjax.demo import main

raise SystemExit(main())
