from hybridperf.cli.app import main

main()
