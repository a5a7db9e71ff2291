// Package failure says what a failed call is, from its error alone: its
// class (Classify) and root cause, the provider's status, code and
// message (ProviderErrorOf, APIError), the wait it asks for (HeaderWait,
// ErrorWait, TextWait), its text with secrets scrubbed (Scrub, Text), and
// the signature and cluster that group it with failures like it
// (Signature, ClusterID). A Memo does all of it at once, cheaply for a
// repeated error: it is the one path by which the selfimprove loop
// classifies every failure.
//
// The package imports nothing of the loop, so an SDK adapter or any
// program can use it on its own. Error chains are walked with a bound
// (Walk, Is): a chain that never ends, or a method that panics, gives a
// result rather than a hang or a crash.
package failure
