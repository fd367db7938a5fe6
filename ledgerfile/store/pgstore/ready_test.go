package pgstore

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWritable: a fresh log takes rows; one whose database turned
// read-only, or a closed store, does not, and says why without the
// password.
func TestWritable(t *testing.T) {
	ctx := context.Background()
	s, u := open(t, Options{})
	require.NoError(t, s.Writable(ctx))

	pu, err := url.Parse(u)
	require.NoError(t, err)
	db := strings.TrimPrefix(pu.Path, "/")
	var ro *Store
	sqlExec(t, u, "ALTER DATABASE "+db+" SET default_transaction_read_only = on")
	ro, err = Open(ctx, u, Options{})
	require.NoError(t, err)
	defer ro.Close()
	err = ro.Writable(ctx)
	require.ErrorContains(t, err, "read-only")
	require.ErrorContains(t, err, "postgres ")

	s.Close()
	require.Error(t, s.Writable(ctx))
}
