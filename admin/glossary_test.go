package admin_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/self-improving-loop/selfimprove/admin"
)

// TestGlossaryServed: the dashboard serves the glossary it shows, which is
// docs/glossary.md as it stands (issue 32: a glossary linked from the
// README and the dashboard).
func TestGlossaryServed(t *testing.T) {
	want, err := os.ReadFile("../docs/glossary.md")
	if err != nil {
		t.Fatal(err)
	}
	copyOf, err := os.ReadFile("dashboard/glossary.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(copyOf, want) {
		t.Fatal("admin/dashboard/glossary.md is not docs/glossary.md: cp docs/glossary.md admin/dashboard/")
	}
	rec := httptest.NewRecorder()
	admin.Dashboard().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/glossary.md", nil))
	got, _ := io.ReadAll(rec.Result().Body)
	if rec.Code != http.StatusOK || !bytes.Equal(got, want) {
		t.Errorf("GET /glossary.md: %d, %d bytes; want 200 and the glossary", rec.Code, len(got))
	}
}
