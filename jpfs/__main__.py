from jpfs.cli.main import main

raise SystemExit(main())
