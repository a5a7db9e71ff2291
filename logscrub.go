package selfimprove

import (
	"context"
	"log/slog"

	"github.com/self-improving-loop/selfimprove/failure"
)

// scrubHandler is the loop's log handler around the one WithLogger gave:
// it runs failure.Scrub over every error a record carries, so that a
// secret in a store's, a strategy's or a notifier's error text never
// reaches the log (docs/operations.md). An error is an attribute whose
// value is an error, or a string under the key "error"; only the value
// is scrubbed, at any depth of groups. A record with none passes as it
// is.
type scrubHandler struct{ h slog.Handler }

// scrubbing returns l's logger with its handler in a scrubHandler (once).
func scrubbing(l *slog.Logger) *slog.Logger {
	if _, ok := l.Handler().(scrubHandler); ok {
		return l
	}
	return slog.New(scrubHandler{l.Handler()})
}

func (s scrubHandler) Enabled(ctx context.Context, l slog.Level) bool { return s.h.Enabled(ctx, l) }

func (s scrubHandler) Handle(ctx context.Context, r slog.Record) error {
	dirty := false
	r.Attrs(func(a slog.Attr) bool {
		dirty = errorAttr(a)
		return !dirty
	})
	if !dirty {
		return s.h.Handle(ctx, r)
	}
	c := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		c.AddAttrs(scrubAttr(a))
		return true
	})
	return s.h.Handle(ctx, c)
}

func (s scrubHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := make([]slog.Attr, len(as))
	for i, a := range as {
		c[i] = scrubAttr(a)
	}
	return scrubHandler{s.h.WithAttrs(c)}
}

func (s scrubHandler) WithGroup(name string) slog.Handler { return scrubHandler{s.h.WithGroup(name)} }

// errorAttr reports whether a holds an error, or may (a group, or a
// value resolved later).
func errorAttr(a slog.Attr) bool {
	switch a.Value.Kind() {
	case slog.KindAny:
		_, ok := a.Value.Any().(error)
		return ok
	case slog.KindString:
		return a.Key == "error"
	case slog.KindGroup, slog.KindLogValuer:
		return true
	}
	return false
}

// scrubAttr returns a with its errors scrubbed.
func scrubAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindAny:
		if err, ok := v.Any().(error); ok && err != nil {
			return slog.String(a.Key, failure.Scrub(err.Error()))
		}
	case slog.KindString:
		if a.Key == "error" {
			return slog.String(a.Key, failure.Scrub(v.String()))
		}
	case slog.KindGroup:
		g := v.Group()
		c := make([]slog.Attr, len(g))
		for i, ga := range g {
			c[i] = scrubAttr(ga)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(c...)}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
