package selfimprove

import (
	"context"
	"log/slog"
)

// Level is the log level of e, as the default notifier (and notify.Log)
// logs it:
//
//   - Warn, for what may need a person: a rollback or a rollback that
//     failed, a proposal filed, a circuit opened, a dead route, an
//     account-wide cause, the fleet unreachable;
//   - Info, for the loop's own decisions and recoveries: a change
//     applied or confirmed, a circuit closed, an account or the fleet
//     recovered, the daily summary;
//   - Debug, for operator actions, which the operator already knows of:
//     a config, threshold or critical flag set, rejected tweaks cleared,
//     a proposal approved or rejected;
//   - a digest, the level of its most severe event.
func (e Event) Level() slog.Level {
	switch e.Type {
	case EventRolledBack, EventRollbackFailed, EventProposalFiled, EventCircuitOpened, EventRouteDead,
		EventAccountCause, EventFleetUnreachable:
		return slog.LevelWarn
	case EventConfigSet, EventThresholdSet, EventCriticalSet, EventProposeOnlySet, EventRejectedCleared, EventProposalApproved, EventProposalRejected:
		return slog.LevelDebug
	case EventDigest:
		level := slog.LevelDebug
		for _, d := range e.Digest {
			level = max(level, d.Level())
		}
		return level
	}
	return slog.LevelInfo
}

// logEvent logs e through l at its Level: a digest as its events, each
// on its own line at its own level, as a log has no burst to spare.
func logEvent(ctx context.Context, l *slog.Logger, e Event) {
	if e.Type == EventDigest && len(e.Digest) > 0 {
		for _, d := range e.Digest {
			logEvent(ctx, l, d)
		}
		return
	}
	if level := e.Level(); l.Enabled(ctx, level) {
		l.LogAttrs(ctx, level, "selfimprove: "+e.Message, e.LogValue().Group()...)
	}
}

// logNotifier is the loop's notifier unless WithNotifier is given: it logs
// each event through the loop's logger at its Level (as notify.Log does).
type logNotifier struct{ l *slog.Logger }

func (n logNotifier) Notify(ctx context.Context, e Event) error {
	logEvent(ctx, n.l, e)
	return nil
}
