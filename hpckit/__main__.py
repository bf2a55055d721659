from hpckit.cli import main

main()
