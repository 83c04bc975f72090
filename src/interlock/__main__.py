from interlock.cli import main

main()
