// Package partition names the GPT partitions of a Borough disk: their type
// GUIDs and partition names. The image builder creates them; the node finds
// them by type.
package partition

// Type GUIDs, in the canonical (mixed-endian display) form.
const (
	// ESPType is the UEFI-defined EFI system partition type.
	ESPType = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
	// DataType marks Borough's encrypted data partition. It is Borough's
	// own, so that no other OS mistakes the partition for one of its own
	// and no Borough node mistakes another OS's partition for its data.
	DataType = "0E4E1C3B-3C0B-4C47-9E6F-B0A0C1E5D7A2"
)

// Partition names.
const (
	ESPName  = "ESP"
	DataName = "borough-data"
)
