package failure

// BadOutput marks err as a bad output: the model answered, but the answer
// failed the caller's validation or parsing, or was a refusal. Classify
// gives ClassBadOutput for it, whatever err's text says; errors.Is and
// errors.As see err through it, and its text is err's. Another sample
// usually passes, so the loop retries it by default (after the config's
// Backoff: at once by default) and counts it toward the agent's health; the built-in strategy
// answers with more attempts, then a proposal (another route, or the
// output format stated in the prompt). BadOutput(nil) is nil.
//
// Without it, an error of the caller's own (no HTTP status in its chain
// or text) whose text says the output did not match a schema, could not
// be parsed, or was refused is classed bad_output too; a provider's 400
// stays bad_request.
func BadOutput(err error) error {
	if err == nil {
		return nil
	}
	return &badOutput{err}
}

type badOutput struct{ err error }

func (e *badOutput) Error() string { return e.err.Error() }

// Unwrap returns the error it marks.
func (e *badOutput) Unwrap() error { return e.err }

// FailureClass returns ClassBadOutput.
func (e *badOutput) FailureClass() Class { return ClassBadOutput }
