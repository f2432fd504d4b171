package protostrict

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/borough-os/borough/proto/enrolmentpb"
)

// withUnknown adds an unknown varint field 99 to m and returns m.
func withUnknown[M proto.Message](m M) M {
	m.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	return m
}

func TestUnknown(t *testing.T) {
	iface := func() *enrolmentpb.Interface { return &enrolmentpb.Interface{Name: "eth0"} }
	network := func(list ...*enrolmentpb.Interface) *enrolmentpb.Config {
		return &enrolmentpb.Config{Network: &enrolmentpb.Network{Interfaces: list}}
	}
	for _, tc := range []struct {
		name string
		msg  proto.Message
		path string
		ok   bool
	}{
		{"none", network(iface(), iface()), "", false},
		{"top level", withUnknown(&enrolmentpb.Config{Version: 1}), "", true},
		{"nested", &enrolmentpb.Config{Mode: &enrolmentpb.Config_Bootstrap{Bootstrap: withUnknown(&enrolmentpb.Bootstrap{})}},
			"bootstrap", true},
		{"in a list", network(iface(), withUnknown(iface())), "network.interfaces[1]", true},
		{"in a map", &structpb.Struct{Fields: map[string]*structpb.Value{
			"a": structpb.NewStringValue("x"), "b": withUnknown(structpb.NewStringValue("y")),
		}}, "fields[b]", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, ok := Unknown(tc.msg)
			if path != tc.path || ok != tc.ok {
				t.Errorf("Unknown = %q, %v; want %q, %v", path, ok, tc.path, tc.ok)
			}
		})
	}
}
