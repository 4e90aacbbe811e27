from memlint.cli import main

raise SystemExit(main())
