from hybridperf.cli.entry import main

main()
