package main

import (
	"strings"
	"testing"
)

func TestAPIAddrsErrors(t *testing.T) {
	for _, f := range []string{"node-a", "=127.0.0.1:7835", "node-a=127.0.0.1", "node-a="} {
		if _, err := apiAddrs([]string{f}); err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("apiAddrs(%q) = %v; want an error naming it", f, err)
		}
	}
}
