module github.com/semaq/semaq/tools/citest

go 1.26.8
