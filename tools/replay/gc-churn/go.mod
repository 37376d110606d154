module gcchurn

go 1.22
