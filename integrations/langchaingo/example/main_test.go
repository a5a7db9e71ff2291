package main

import (
	"strings"
	"testing"

	"github.com/self-improving-loop/selfimprove/internal/oaidemo"
)

func TestExample(t *testing.T) {
	var b strings.Builder
	if err := run(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Log(out)
	if err := oaidemo.Check(out, "call", oaidemo.NewModel); err != nil {
		t.Error(err)
	}
}
