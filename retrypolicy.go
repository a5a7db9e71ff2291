package selfimprove

import (
	"fmt"
	"slices"
	"time"

	"github.com/self-improving-loop/selfimprove/failure"
)

// RetryPolicy says which failed attempts the loop retries, and how long
// it may wait when the server asks for a pause. Pass it with
// WithRetryPolicy. The config's MaxAttempts and the call's Budget still
// bound the attempts.
//
// Before a retry the loop waits the longer of the config's Backoff and
// the wait the failure asks for, capped at MaxWait: the failed
// response's headers, seen through Transport (failure.HeaderWait), else
// an error in the chain with a method RetryAfter() time.Duration, else
// the provider's message ("Please try again in 1.5s",
// failure.ErrorWait). When the wait, whichever it is, would pass the caller's deadline, the call
// returns the failure at once instead of sleeping into certain failure,
// and the failure is the agent's (not an ignored call); a wait is cut
// short when the caller's context is cancelled.
type RetryPolicy struct {
	// Permanent are the classes whose failure ends a call at once: a
	// retry cannot succeed. Default (nil): failure.PermanentClasses, that
	// is auth, bad_request, context_length, content_filter, not_found,
	// model_unavailable and quota; every other class (rate_limit,
	// timeout, overloaded, network, empty_response, and tool_error,
	// other, or a class of the caller's own) is retried. An empty,
	// non-nil slice retries every class. At most 64 classes, each
	// 1 to 64 bytes.
	Permanent []failure.Class
	// MaxWait caps the wait a failure asks for. Default 0: one minute.
	// It must be in [0, 1h], as one wait between attempts is.
	MaxWait time.Duration
	// IgnoreServerWait makes the loop wait the Backoff only, whatever
	// the failure asks for. Default false.
	IgnoreServerWait bool
	// TransientAttempts is the fewest attempts a call makes for
	// transient failures (rate_limit, overloaded, timeout, network) and
	// bad outputs (failure.BadOutput: another sample usually passes; they
	// are retried at once), whatever its config's MaxAttempts: the LLM
	// SDKs retry the transient ones twice
	// on their own, and the integrations turn that off so that the loop
	// sees every failure, so the loop never retries less than the SDK
	// did. Without a Config.Backoff, every retry of a transient
	// failure on the same route waits as the SDKs do (the server's wait,
	// else 0.5 s doubled with jitter, up to 8 s); the attempts the config
	// would not have made wait at least 0.5 s doubled each time, with
	// jitter, or the
	// server's wait when longer, as the SDKs do. Default 0: 3 attempts;
	// 1 turns the floor off; at most 10. The call's Budget and deadline
	// still bound it.
	TransientAttempts int
	// JitterSeed makes the jitter of the backoffs a fixed sequence drawn
	// from it, so that a simulation on a fake clock runs the same way
	// every time (with one caller at a time). Default 0: the jitter is
	// random, which is what a fleet of callers needs to spread its
	// retries.
	JitterSeed uint64
	// StreamIdle is the stream idle limit: the longest silence between
	// two chunks of a streamed attempt once its first token came (fn
	// reports them with stream.FirstToken and stream.Chunk, as the
	// integrations' Stream helpers do), for the attempts of a config with
	// a FirstTokenTimeout. A longer silence cuts the attempt, with
	// failure.ErrStreamStalled as its context's cause, of class
	// failure.ClassStreamStalled: retried, and on the next route of a
	// ladder at once. Default 0: 30 seconds; negative: none; at most one
	// hour.
	StreamIdle time.Duration
}

// defaultStreamIdle is RetryPolicy.StreamIdle's default.
const defaultStreamIdle = 30 * time.Second

// retryRules is a RetryPolicy with its defaults, as the loop uses it.
type retryRules struct {
	permanent  []failure.Class
	maxWait    time.Duration
	serverWait bool
	floor      int           // TransientAttempts
	streamIdle time.Duration // StreamIdle; 0: none
}

// rules returns p with its defaults filled in.
func (p RetryPolicy) rules() retryRules {
	r := retryRules{permanent: p.Permanent, maxWait: p.MaxWait, serverWait: !p.IgnoreServerWait}
	if r.permanent == nil {
		r.permanent = failure.PermanentClasses()
	} else {
		r.permanent = slices.Clone(r.permanent)
	}
	if r.maxWait == 0 {
		r.maxWait = defaultMaxWait
	}
	if r.floor = p.TransientAttempts; r.floor == 0 {
		r.floor = defaultTransientAttempts
	}
	switch {
	case p.StreamIdle == 0:
		r.streamIdle = defaultStreamIdle
	case p.StreamIdle > 0:
		r.streamIdle = p.StreamIdle
	}
	return r
}

// attempts returns how many attempts a call under cfg may make after a
// failure of class: the config's, or the transient floor when higher.
func (r *retryRules) attempts(cfg *Config, class failure.Class) int {
	if n := cfg.attempts(); n >= r.floor || !floored(class) {
		return n
	}
	return r.floor
}

// floored reports whether the transient floor applies to failures of
// class: those the SDKs retry, and bad outputs.
func floored(class failure.Class) bool { return sdkRetried(class) || class == failure.ClassBadOutput }

// sdkRetried reports whether the LLM SDKs retry a failure of class on
// their own: 429, 408, 5xx and connection errors; and a stream's stall
// before its first token, which the loop cancels like a timeout.
func sdkRetried(class failure.Class) bool {
	switch class {
	case failure.ClassRateLimit, failure.ClassOverloaded, failure.ClassTimeout, failure.ClassNetwork, failure.ClassFirstTokenTimeout, failure.ClassStreamStalled:
		return true
	}
	return false
}

// validate checks p's fields against their bounds.
func (p RetryPolicy) validate() error {
	if len(p.Permanent) > maxPermanent {
		return fieldErr("Permanent", "%d classes, more than %d", len(p.Permanent), maxPermanent)
	}
	for i, c := range p.Permanent {
		if c == "" {
			return fieldErr(fmt.Sprintf("Permanent[%d]", i), "an empty class")
		}
		if err := checkText(fmt.Sprintf("Permanent[%d]", i), string(c), maxClassLen); err != nil {
			return err
		}
	}
	if p.TransientAttempts < 0 || p.TransientAttempts > maxTransientAttempts {
		return fieldErr("TransientAttempts", "%d outside [0, %d]", p.TransientAttempts, maxTransientAttempts)
	}
	if p.StreamIdle > maxBackoff {
		return fieldErr("StreamIdle", "%v, more than %v", p.StreamIdle, maxBackoff)
	}
	return inRange("MaxWait", p.MaxWait, 0, maxBackoff)
}

// maxPermanent bounds RetryPolicy.Permanent; maxClassLen, a class named
// there.
const (
	maxPermanent = 64
	maxClassLen  = 64
)

// retries reports whether a failure of class c may be retried.
func (r *retryRules) retries(c failure.Class) bool { return !slices.Contains(r.permanent, c) }

const (
	defaultTransientAttempts = 3                      // RetryPolicy.TransientAttempts's default
	maxTransientAttempts     = 10                     // and its cap
	transientBackoff         = 500 * time.Millisecond // the floor's base wait (see RetryPolicy)
	transientMaxBackoff      = 8 * time.Second        // the most a transient retry waits without a Backoff, as openai-go and anthropic-sdk-go
	defaultMaxWait           = time.Minute            // RetryPolicy.MaxWait's default
	waitRoundUp              = 10 * time.Millisecond  // a server's wait is rounded up to this
)

// roundUpWait rounds a server's wait up to waitRoundUp, so that a retry
// does not arrive a hair early.
func roundUpWait(d time.Duration) time.Duration {
	if r := d % waitRoundUp; r != 0 {
		d += waitRoundUp - r
	}
	return d
}
