// Package protostrict finds fields a protobuf message carries that this
// program's schema does not know, at any depth.
//
// proto.Unmarshal keeps unknown fields instead of failing, which is right
// for a server talking to newer clients and wrong for a node reading a
// config or ticket: a field it skips may be one the sender meant to
// restrict something (a newer config's tighter policy). The protobuf
// module has no option to reject them, and GetUnknown reports only the
// message it is called on, so a field unknown inside a nested message went
// through. Unknown walks the whole tree.
package protostrict

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Unknown returns the path of the first message in m (m itself is "") that
// has unknown fields, and whether there is one.
func Unknown(m proto.Message) (string, bool) {
	return unknown(m.ProtoReflect(), "")
}

func unknown(m protoreflect.Message, path string) (found string, ok bool) {
	if len(m.GetUnknown()) > 0 {
		return path, true
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		found, ok = unknownIn(fd, v, join(path, string(fd.Name())))
		return !ok
	})
	return found, ok
}

// unknownIn looks into the messages held by field fd's value v.
func unknownIn(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) (string, bool) {
	switch {
	case fd.IsList() && fd.Message() != nil:
		l := v.List()
		for i := range l.Len() {
			if p, ok := unknown(l.Get(i).Message(), fmt.Sprintf("%s[%d]", path, i)); ok {
				return p, true
			}
		}
	case fd.IsMap() && fd.MapValue().Message() != nil:
		var found string
		var ok bool
		v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			found, ok = unknown(mv.Message(), fmt.Sprintf("%s[%v]", path, k.Interface()))
			return !ok
		})
		return found, ok
	case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
		return unknown(v.Message(), path)
	}
	return "", false
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
