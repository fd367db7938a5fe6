//go:build !unix

package cmd

import "os"

func openNoBlock(path string) (*os.File, error) { return os.Open(path) }
