package pgstore

import (
	"bytes"
	"encoding/binary"
	"strconv"

	"github.com/jackc/pgx/v5/pgtype"
)

// This file is the position of a row's version in its table (its ctid),
// which the grant statements and the held writes return for every row
// they write, and which a held write then finds the row by (see
// heldStatement): a TID scan reads one page, where a look-up through the
// primary key reads three or four.

// tuplePos is where a version of a row lies: the block and the line
// pointer. The zero value, line pointer 0, which no tuple has, says the
// position is not known.
type tuplePos struct {
	block  uint32
	offset uint16
}

// known reports whether p names a position.
func (p tuplePos) known() bool { return p.offset != 0 }

// posOf is the position pgx read from a ctid column.
func posOf(t pgtype.TID) tuplePos {
	if !t.Valid {
		return tuplePos{}
	}
	return tuplePos{block: t.BlockNumber, offset: t.OffsetNumber}
}

// parsePos reads a ctid in its text form, "(block,offset)", as a held
// write's answer carries it; the zero tuplePos when b is not one.
func parsePos(b []byte) tuplePos {
	b, ok := bytes.CutPrefix(b, []byte("("))
	if !ok {
		return tuplePos{}
	}
	b, ok = bytes.CutSuffix(b, []byte(")"))
	if !ok {
		return tuplePos{}
	}
	blk, off, ok := bytes.Cut(b, []byte(","))
	if !ok {
		return tuplePos{}
	}
	block, err := strconv.ParseUint(string(blk), 10, 32)
	if err != nil {
		return tuplePos{}
	}
	offset, err := strconv.ParseUint(string(off), 10, 16)
	if err != nil {
		return tuplePos{}
	}
	return tuplePos{block: uint32(block), offset: uint16(offset)}
}

// tid writes p as a binary tid (tidsend): the block, then the offset.
func (w *copyWriter) tid(p tuplePos) {
	w.buf = binary.BigEndian.AppendUint32(w.buf, 6)
	w.buf = binary.BigEndian.AppendUint32(w.buf, p.block)
	w.buf = binary.BigEndian.AppendUint16(w.buf, p.offset)
}

func tidArray(vs []tuplePos) binArray { return arrayOf(oidTID, vs, 6, (*copyWriter).tid) }
