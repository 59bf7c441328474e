module example.com/suite

go 1.26.8
