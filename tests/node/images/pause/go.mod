module netendpoint.dev/tests/node/images/pause

go 1.26
