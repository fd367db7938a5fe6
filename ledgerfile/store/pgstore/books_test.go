package pgstore

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
)

// Book serializes its holders across connections (two stores, as two
// machines): 40 read-increment-writes of one counter lose none, and each
// one's row lands with it, numbered without a gap or a duplicate.
func TestBooksSerializeAndLogWithTheRecord(t *testing.T) {
	ctx := context.Background()
	a, u := open(t, Options{})
	b, err := Open(ctx, u, Options{})
	require.NoError(t, err)
	defer b.Close()
	var wg sync.WaitGroup
	for i := range 40 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			err := s.Book(ctx, "k", func(old []byte, now time.Time) (store.Record, []ledgerfile.Row, error) {
				n := 0
				if old != nil {
					n, _ = strconv.Atoi(string(old))
				}
				n++
				row := ledgerfile.Row{TS: now, Job: "k", Attempt: n, Seat: "s", Tokens: 1}
				return store.Record{Data: []byte(strconv.Itoa(n)), Due: now.Add(time.Hour)}, []ledgerfile.Row{row}, nil
			})
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	require.NoError(t, a.Book(ctx, "k", func(old []byte, _ time.Time) (store.Record, []ledgerfile.Row, error) {
		assert.Equal(t, "40", string(old))
		return store.Record{Data: old, Due: time.Now().Add(time.Hour)}, nil, nil
	}))
	rows, err := a.ReadJob(ctx, "k")
	require.NoError(t, err)
	require.Len(t, rows, 40)
	for i, r := range rows {
		assert.Equal(t, i+1, r.Attempt)
	}
}

// A failed decision keeps neither its record nor its rows; Due lists the
// keys whose time has passed; nil data forgets a key.
func TestBooksDueAndForget(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	s, _ := open(t, Options{Now: func() time.Time { return now }})
	put := func(key string, due time.Time) {
		require.NoError(t, s.Book(ctx, key, func(old []byte, at time.Time) (store.Record, []ledgerfile.Row, error) {
			assert.True(t, at.Equal(now), "the store's clock")
			return store.Record{Data: []byte("x"), Due: due}, nil, nil
		}))
	}
	put("past", now.Add(-time.Second))
	put("later", now.Add(time.Minute))
	boom := errors.New("boom")
	err := s.Book(ctx, "failed", func([]byte, time.Time) (store.Record, []ledgerfile.Row, error) {
		return store.Record{}, nil, boom
	})
	require.ErrorIs(t, err, boom)
	keys, err := s.Due(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"past"}, keys)

	require.NoError(t, s.Book(ctx, "past", func(old []byte, _ time.Time) (store.Record, []ledgerfile.Row, error) {
		assert.Equal(t, "x", string(old))
		return store.Record{}, nil, nil
	}))
	require.NoError(t, s.Book(ctx, "past", func(old []byte, _ time.Time) (store.Record, []ledgerfile.Row, error) {
		assert.Nil(t, old, "forgotten")
		return store.Record{}, nil, nil
	}))
	now = now.Add(2 * time.Minute)
	keys, err = s.Due(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"later"}, keys)
}
