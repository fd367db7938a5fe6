package main

import (
	"os"

	"retrygate/cmd"
)

func main() { os.Exit(cmd.Main()) }
