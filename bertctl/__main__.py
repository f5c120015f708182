from bertctl.cli import main

main()
