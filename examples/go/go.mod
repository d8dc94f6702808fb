module github.com/libcosyvoice/libcosyvoice/examples/go

go 1.19
