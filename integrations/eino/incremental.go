package eino

import (
	"context"

	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
	si "github.com/self-improving-loop/selfimprove"
)

// streamIncremental is Stream for Options.Incremental: the call runs in
// its own goroutine and passes each chunk on as it arrives, through a
// forwarder that sees the reader closed as soon as it is (see run).
func (m *Model) streamIncremental(ctx context.Context, input []*schema.Message, opts ...model.Option) *schema.StreamReader[*schema.Message] {
	// The pipe has no buffer: a Send returns once the reader has taken
	// the chunk, or as soon as the reader is closed. The reader drops
	// the forwarder's probes: they never reach the caller.
	sr, sw := schema.Pipe[*schema.Message](0)
	out := schema.StreamReaderWithConvert(sr, func(msg *schema.Message) (*schema.Message, error) {
		if msg == probe {
			return nil, schema.ErrNoValue
		}
		return msg, nil
	})
	ctx, cancel := context.WithCancel(ctx)
	ctx, id := m.start(ctx)
	f := &forwarder{q: make(chan item, 16), gone: make(chan struct{})}
	go f.run(sw, cancel)
	go func() {
		defer cancel()
		defer close(f.q)
		sent := false // the attempt under way passed chunks on
		_, err := m.loop.ExecuteWithImprovement(ctx, id, func(ctx context.Context, cfg si.Config) error {
			if sent {
				f.send(nil, ErrStartOver)
				sent = false
			}
			chunks, err := Stream(ctx, m.inner, m.route(cfg), input, func(msg *schema.Message) {
				sent = true
				f.send(msg, nil)
			}, opts...)
			if err == nil && m.o.Check != nil {
				msg, cerr := schema.ConcatMessages(chunks)
				if err = cerr; err == nil {
					err = m.check(msg)
				}
			}
			return err
		})
		if err != nil {
			f.send(nil, err)
		}
	}()
	return out
}

// probe is what the forwarder sends to learn whether the reader was
// closed; the reader returned by streamIncremental drops it.
var probe = &schema.Message{}

// item is a chunk, or an error, for the reader.
type item struct {
	msg *schema.Message
	err error
}

// forwarder passes a call's chunks on to the reader of an Incremental
// stream, and cancels the call as soon as the reader is closed.
type forwarder struct {
	q    chan item     // the chunks and errors, in order; closed after the last
	gone chan struct{} // closed once the reader was closed
}

// send queues a chunk or an error for the reader; it drops it once the
// reader was closed.
func (f *forwarder) send(msg *schema.Message, err error) {
	select {
	case f.q <- item{msg, err}:
	case <-f.gone:
	}
}

// run passes the items of q on to sw, and closes sw after the last.
// Eino's pipe tells the writer that its reader was closed only in Send;
// so, while the reader is outside Recv (it took a chunk, or has not
// read yet) and no chunk waits, run keeps a probe in flight: the
// reader's next Recv takes it (and drops it), or the Send returns as
// soon as the reader is closed. Once a probe is taken, the reader is in
// Recv, and run waits for the next chunk: a Close made meanwhile by
// another goroutine (Eino's reader is read, then closed, by one) is seen
// when that chunk is sent, as without the probe. A reader closed cancels
// the call: a stalled stream, or the loop's wait before its next
// attempt, ends at once.
func (f *forwarder) run(sw *schema.StreamWriter[*schema.Message], cancel context.CancelFunc) {
	defer sw.Close()
	probing := true // the reader is outside Recv
	for {
		var it item
		var ok bool
		if probing {
			select {
			case it, ok = <-f.q:
			default:
				if sw.Send(probe, nil) {
					f.closed(cancel)
					return
				}
				probing = false
				continue
			}
		} else {
			it, ok = <-f.q
		}
		if !ok {
			return
		}
		if sw.Send(it.msg, it.err) {
			f.closed(cancel)
			return
		}
		probing = true
	}
}

// closed cancels the call whose reader was closed, and lets its sends
// go.
func (f *forwarder) closed(cancel context.CancelFunc) {
	close(f.gone)
	cancel()
}
