from spanbert.cli import main

raise SystemExit(main())
