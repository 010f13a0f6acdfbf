package cleanup

import (
	"errors"
	"slices"
	"testing"
)

func TestRunUndoesInReverseDespiteErrors(t *testing.T) {
	var s Stack
	var order []int
	boom := errors.New("boom")
	s.Add(func() error { order = append(order, 1); return nil })
	s.Add(func() error { order = append(order, 2); return boom })
	s.Add(func() error { order = append(order, 3); return nil })
	if err := s.Run(); !errors.Is(err, boom) {
		t.Errorf("Run = %v, want it to carry boom", err)
	}
	if !slices.Equal(order, []int{3, 2, 1}) {
		t.Errorf("undo order %v, want [3 2 1]", order)
	}
	if err := s.Run(); err != nil || len(order) != 3 {
		t.Errorf("a second Run undid again: %v, %v", err, order)
	}
}

func TestReleaseForgets(t *testing.T) {
	var s Stack
	ran := false
	s.Add(func() error { ran = true; return nil })
	s.Release()
	if err := s.Run(); err != nil || ran {
		t.Errorf("Run after Release = %v, ran %v; want nothing undone", err, ran)
	}
}
