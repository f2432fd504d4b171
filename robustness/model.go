package robustness

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// Kind is an operation of the workload.
type Kind string

// Kinds of operations.
const (
	Get    Kind = "get"
	Put    Kind = "put"
	Delete Kind = "delete"
	// CAS puts Value if the key holds Expect (a transaction comparing
	// the value).
	CAS Kind = "cas"
)

// Input is what a call asked.
type Input struct {
	Kind   Kind
	Key    string
	Value  string
	Expect string
}

// Output is what a call answered. Unknown says it failed or timed out:
// its effect, if any, is unknown.
type Output struct {
	Found     bool
	Value     string
	Succeeded bool
	Unknown   bool
}

// state is a key's: absent, or holding value.
type state struct {
	exists bool
	value  string
}

// step applies in to s, and says whether out is what the key in state s
// answers.
func step(s state, in Input, out Output) (bool, state) {
	switch in.Kind {
	case Get:
		return out.Found == s.exists && (!s.exists || out.Value == s.value), s
	case Put:
		return true, state{true, in.Value}
	case Delete:
		return true, state{}
	case CAS:
		applies := s.exists && s.value == in.Expect
		next := s
		if applies {
			next = state{true, in.Value}
		}
		return out.Unknown || out.Succeeded == applies, next
	}
	return false, s
}

// model is the porcupine model of the workload's keys.
var model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(Input).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return state{} },
	Step: func(s, in, out any) (bool, any) {
		return step(s.(state), in.(Input), out.(Output))
	},
	DescribeOperation: func(in, out any) string { return describe(in.(Input), out.(Output)) },
	DescribeState: func(s any) string {
		if st := s.(state); st.exists {
			return fmt.Sprintf("%q", st.value)
		}
		return "absent"
	},
}

func describe(in Input, out Output) string {
	var call string
	switch in.Kind {
	case Get:
		call = fmt.Sprintf("get(%s)", in.Key)
	case Put:
		call = fmt.Sprintf("put(%s, %q)", in.Key, in.Value)
	case Delete:
		call = fmt.Sprintf("delete(%s)", in.Key)
	case CAS:
		call = fmt.Sprintf("cas(%s, %q -> %q)", in.Key, in.Expect, in.Value)
	}
	switch {
	case out.Unknown:
		return call + " -> unknown"
	case in.Kind == Get && out.Found:
		return fmt.Sprintf("%s -> %q", call, out.Value)
	case in.Kind == Get:
		return call + " -> absent"
	case in.Kind == CAS:
		return fmt.Sprintf("%s -> %v", call, out.Succeeded)
	}
	return call + " -> ok"
}
