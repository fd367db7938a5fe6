//go:build !unix

package ledgerfile

const (
	noFollow = 0
	nonBlock = 0
)
