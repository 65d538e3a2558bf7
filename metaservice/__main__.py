from metaservice.cli import main

main()
