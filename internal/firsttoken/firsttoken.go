// Package firsttoken carries an attempt's first-token watch from the
// loop, which puts it in the attempt's context when the config has a
// FirstTokenTimeout, to package stream, through which the wrapped
// function reports its first token.
package firsttoken

// Key is the context key of an attempt's Watch.
type Key struct{}

// Watch is what an attempt's context carries under Key.
type Watch interface {
	// FirstToken reports that the attempt received its first token;
	// calls after the first do nothing. It is safe for concurrent use.
	FirstToken()
	// Chunk reports that the attempt received a piece of its stream,
	// after the first token or with it. It is safe for concurrent use.
	Chunk()
}
