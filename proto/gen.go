// Package proto holds Borough's protobuf schemas. The generated Go code is
// committed; `go generate ./proto` regenerates it with Debian's
// protobuf-compiler and protoc-gen-go.
package proto

//go:generate protoc --go_out=. --go_opt=module=github.com/borough-os/borough/proto authority.proto enrolment.proto join.proto node.proto unlock.proto
