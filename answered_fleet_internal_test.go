package selfimprove

import "testing"

// TestAnsweredStaysOwnAcrossAdopt: a replica's split by the answering
// route (Answered) is left out of the fleet's shared part, and kept when
// the replica adopts the fleet's state (before, it was in the shared part
// and adopt emptied it).
func TestAnsweredStaysOwnAcrossAdopt(t *testing.T) {
	s := newState("a", Config{Version: 1})
	s.Quality = &qualityBook{
		Recs:     []qualityRec{{Version: 1, Route: "", Scored: 2, Sum: 1.3, Squares: 0.97}},
		Answered: []qualityRec{{Version: 1, Route: "backup", Scored: 1, Sum: 0.4, Squares: 0.16}},
	}
	if sh := s.sharedPart(); sh.Quality != nil && len(sh.Quality.Answered) > 0 {
		t.Errorf("the shared part holds this replica's Answered: %+v", sh.Quality.Answered)
	}
	data, err := encodeShared(&s)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := decodeState(data, "a")
	if err != nil {
		t.Fatal(err)
	}
	s.adopt(&dec)
	if len(s.Quality.Answered) != 1 {
		t.Errorf("Answered lost by adopt: %+v", s.Quality.Answered)
	}
}
