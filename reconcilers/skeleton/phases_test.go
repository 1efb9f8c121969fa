package skeleton

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

type trace struct{ ran []string }

func phase(name string, res Result, err error) Phase[*trace] {
	return func(_ context.Context, s *trace) (Result, error) {
		s.ran = append(s.ran, name)
		return res, err
	}
}

func TestRunPhases(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		phases  []Phase[*trace]
		ran     []string
		requeue time.Duration
		err     bool
	}{
		{"all run, shortest requeue wins",
			[]Phase[*trace]{phase("a", Requeue(time.Minute), nil), phase("b", Continue(), nil), phase("c", Requeue(5*time.Second), nil)},
			[]string{"a", "b", "c"}, 5 * time.Second, false},
		{"stop ends the run and keeps its requeue",
			[]Phase[*trace]{phase("a", Requeue(time.Minute), nil), phase("b", StopAndRequeue(2*time.Second), nil), phase("c", Requeue(time.Second), nil)},
			[]string{"a", "b"}, 2 * time.Second, false},
		{"an error is collected and later phases still run",
			[]Phase[*trace]{phase("a", Continue(), boom), phase("b", Requeue(time.Second), nil)},
			[]string{"a", "b"}, 0, true},
		{"an error with stop ends the run",
			[]Phase[*trace]{phase("a", Stop(), boom), phase("b", Continue(), nil)},
			[]string{"a"}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &trace{}
			res, err := RunPhases(context.Background(), s, tc.phases...)
			if !reflect.DeepEqual(s.ran, tc.ran) {
				t.Errorf("ran %v, want %v", s.ran, tc.ran)
			}
			if res.RequeueAfter != tc.requeue {
				t.Errorf("requeue %s, want %s", res.RequeueAfter, tc.requeue)
			}
			if (err != nil) != tc.err || (err != nil && !errors.Is(err, boom)) {
				t.Errorf("err %v, want error %v", err, tc.err)
			}
		})
	}
}

func TestShortest(t *testing.T) {
	for _, tc := range [][3]time.Duration{{0, 0, 0}, {0, 3, 3}, {3, 0, 3}, {2, 3, 2}, {-1, 4, 4}} {
		if got := Shortest(tc[0], tc[1]); got != tc[2] {
			t.Errorf("Shortest(%s, %s) = %s, want %s", tc[0], tc[1], got, tc[2])
		}
	}
}
