package main

import (
	"os"

	"github.com/retrygate/retrygate/cmd"
)

func main() { os.Exit(cmd.Main()) }
