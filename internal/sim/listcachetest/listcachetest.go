// Package listcachetest is the fake lister the listcache users' tests
// share: it counts listings, can hold the first one until released, and
// can fail them, so a test sees how many listings its reads caused.
package listcachetest

import (
	"context"
	"errors"
	"sync/atomic"
)

// Lister answers listings of T; wrap List in the method the user's Lister
// interface names.
type Lister[T any] struct {
	Credential string
	// Calls counts the listings made.
	Calls atomic.Int32
	// Entered receives once per listing, when it starts.
	Entered chan struct{}
	// Gate, when set, holds the first listing until it is closed.
	Gate chan struct{}
	// Fail makes every listing fail while set.
	Fail atomic.Bool
	// Answer makes listing n's items (n from 1), or refuses it.
	Answer func(ctx context.Context, n int64) (T, error)
}

// New returns a Lister for credential answering with answer.
func New[T any](credential string, answer func(ctx context.Context, n int64) (T, error)) *Lister[T] {
	return &Lister[T]{Credential: credential, Entered: make(chan struct{}, 100), Answer: answer}
}

// Fingerprint names the credential.
func (l *Lister[T]) Fingerprint() string { return l.Credential }

// List makes one listing.
func (l *Lister[T]) List(ctx context.Context) (T, error) {
	n := int64(l.Calls.Add(1))
	l.Entered <- struct{}{}
	if n == 1 && l.Gate != nil {
		<-l.Gate
	}
	if l.Fail.Load() {
		var zero T
		return zero, errors.New("refused")
	}
	return l.Answer(ctx, n)
}
