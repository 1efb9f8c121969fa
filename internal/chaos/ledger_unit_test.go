package chaos

import (
	"testing"
	"time"
)

func TestLedgerTwins(t *testing.T) {
	at := time.Unix(0, 0)
	tests := []struct {
		name      string
		snapshots [][]sighting
		want      []twin
	}{
		{
			name: "one machine seen many times is no twin",
			snapshots: [][]sighting{
				{{owner: "u1", machine: "pve/101"}},
				{{owner: "u1", machine: "pve/101"}, {owner: "u2", machine: "kv/chaos/c2"}},
				{{owner: "u1", machine: "pve/101"}},
			},
		},
		{
			name: "a clone still running, without an owner, is nobody's",
			snapshots: [][]sighting{
				{{owner: "", machine: "pve/102"}, {owner: "u1", machine: "pve/101"}},
				{{owner: "", machine: "pve/103"}},
			},
		},
		{
			name: "two machines at once",
			snapshots: [][]sighting{
				{{owner: "u1", machine: "pve/101"}, {owner: "u1", machine: "pve/205"}},
			},
			want: []twin{{owner: "u1", machines: []string{"pve/101", "pve/205"}, together: true}},
		},
		{
			name: "a second machine after the first is gone is a twin too",
			snapshots: [][]sighting{
				{{owner: "u1", machine: "kv/chaos/a"}},
				{},
				{{owner: "u1", machine: "kv/chaos/b"}, {owner: "u2", machine: "kv/chaos/c"}},
			},
			want: []twin{{owner: "u1", machines: []string{"kv/chaos/a", "kv/chaos/b"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLedger()
			for i, s := range tt.snapshots {
				l.observe(at.Add(time.Duration(i)*time.Second), s)
			}
			got := l.twins()
			if len(got) != len(tt.want) {
				t.Fatalf("twins = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i].String() != tt.want[i].String() {
					t.Errorf("twin %d = %s, want %s", i, got[i], tt.want[i])
				}
			}
			if _, polls := l.counts(); polls != len(tt.snapshots) {
				t.Errorf("polls = %d, want %d", polls, len(tt.snapshots))
			}
		})
	}
}
