package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
)

// runExport prints the failure memory of --dir as JSON lines; it fails,
// printing nothing, when the memory could not be read.
func runExport(_ context.Context, e *env, _ []string) error {
	if e.o.url != "" {
		return usageErr("export reads a state directory: use --dir (the admin API does not serve the whole memory)")
	}
	return withClient(e, false, func(c *client) error {
		l, err := openReadOnly(c.dir, slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
		if err != nil {
			return fmt.Errorf("export: %w", err)
		}
		defer l.Close()
		// A memory the Loop could not read (cut short, not JSON, too
		// large, a link) is logged and left out: exporting nothing would
		// look whole.
		if l.Metrics().StoreErrors > 0 {
			return fmt.Errorf("the failure memory (%s) could not be read, as the error above says: nothing exported",
				filepath.Join(c.dir, "memory.json"))
		}
		var buf bytes.Buffer
		if err := l.ExportMemory(&buf); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		var doc struct {
			Memories []json.RawMessage `json:"memories"`
		}
		if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		for _, m := range doc.Memories {
			var line bytes.Buffer
			if err := json.Compact(&line, m); err != nil {
				return fmt.Errorf("export: %w", err)
			}
			line.WriteByte('\n')
			if _, err := e.stdout.Write(line.Bytes()); err != nil {
				return err
			}
		}
		return nil
	})
}
