package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/admin"
)

// follow prints the events f keeps as they are recorded, until ctx ends:
// from the admin API's stream (--url), reconnecting after a drop with the
// last event's ID, or by reading the event log as it grows (--dir). With
// --json each event is one line of JSON (an admin.EventView).
func follow(ctx context.Context, c *client, f selfimprove.EventFilter, e *env) error {
	out := bufio.NewWriter(e.stdout)
	print := func(ev admin.EventView) error {
		if e.o.json {
			b, err := json.Marshal(ev)
			if err != nil {
				return err
			}
			out.Write(append(b, '\n'))
		} else {
			fmt.Fprintf(out, followFormat, ev.Time.UTC().Format(time.RFC3339), cell(string(ev.Type)), dash(cell(ev.AgentID)), cell(ev.Message))
		}
		return out.Flush()
	}
	if !e.o.json {
		fmt.Fprintf(out, followFormat, "TIME", "TYPE", "AGENT", "MESSAGE")
		out.Flush()
	}
	// The notice on stderr says when new events will be seen.
	notice := func(format string, args ...any) {
		fmt.Fprintf(e.stderr, "selfimprove events: "+format+" (interrupt to stop)\n", args...)
	}
	if c.dir != "" {
		return followLog(ctx, c, f, e.o.pollInterval, print, notice)
	}
	last := ""
	for {
		err := followStream(ctx, c, f, &last, print, notice)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errClosed) {
			fmt.Fprintln(e.stderr, "selfimprove events: the loop closed")
			return nil
		}
		var ae *apiError
		var na *noAPIError
		if errors.As(err, &ae) || errors.As(err, &na) {
			return err
		}
		// A dropped connection or a slow reader: reconnect after a pause.
		fmt.Fprintf(e.stderr, "selfimprove events: %v; reconnecting\n", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// followFormat aligns the rows of events -f, which cannot wait for the
// widest cell.
const followFormat = "%-20s  %-22s  %-16s  %s\n"

var errClosed = errors.New("the loop closed")

// followLog prints the events appended to the event log, polling it.
func followLog(ctx context.Context, c *client, f selfimprove.EventFilter, every time.Duration, print func(admin.EventView) error, notice func(string, ...any)) error {
	var perr error
	offset, err := c.readLog(0, func(selfimprove.Event) {}) // start at the end
	if err != nil {
		return err
	}
	notice("following %s", filepath.Join(c.dir, "events.jsonl"))
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		offset, err = c.readLog(offset, func(ev selfimprove.Event) {
			if perr == nil && f.Keeps(&ev) {
				perr = print(view(ev))
			}
		})
		if err != nil {
			return err
		}
		if perr != nil {
			return perr
		}
	}
}

// followStream reads the admin API's event stream until it ends.
func followStream(ctx context.Context, c *client, f selfimprove.EventFilter, last *string, print func(admin.EventView) error, notice func(string, ...any)) error {
	q := filterQuery(f)
	if *last != "" {
		q.Set("last_event_id", *last)
	}
	req, err := c.request(ctx, http.MethodGet, "/api/events/stream", q, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("reach the admin API: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c.decodeAnswer(resp, nil)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return c.noAPI(resp) // a page, not the stream
	}
	notice("following %s", c.base+"/api/events/stream")
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var typ string
	var data strings.Builder
	for {
		line, err := readLine(br, 1<<20)
		if errors.Is(err, errLongLine) {
			return fmt.Errorf("an event over 1 MiB in the stream")
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("event stream: %w", err)
		}
		s := strings.TrimRight(string(line), "\r\n")
		switch {
		case s == "":
			switch typ {
			case "dropped":
				// Fell behind: reconnect with the last ID.
				return fmt.Errorf("the admin API dropped the stream (this client fell behind)")
			case "closed":
				return errClosed
			}
			if data.Len() > 0 {
				var ev admin.EventView
				if err := json.Unmarshal([]byte(data.String()), &ev); err != nil {
					return fmt.Errorf("event stream: not an event: %w", err)
				}
				*last = ev.ID
				if err := print(ev); err != nil {
					return err
				}
			}
			typ = ""
			data.Reset()
		case strings.HasPrefix(s, ":"):
		case strings.HasPrefix(s, "event:"):
			typ = strings.TrimSpace(strings.TrimPrefix(s, "event:"))
		case strings.HasPrefix(s, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(s, "data:"), " "))
		}
	}
}
