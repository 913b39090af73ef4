module hostile/gocgo

go 1.19
