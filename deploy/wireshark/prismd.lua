-- prismd.lua: Wireshark dissector for prismd frames (PRISM in-network collectives,
-- EtherType 0x88B5), version 1.0 as specified by docs/protocol.md.
--
-- Usage:  wireshark -X lua_script:deploy/wireshark/prismd.lua
--         tshark -X lua_script:deploy/wireshark/prismd.lua -r capture.pcap -V
-- or copy the file into ~/.local/lib/wireshark/plugins/.
--
-- The protocol is registered as "prismd" (Wireshark already owns "prism", the 802.11
-- Prism capture header); every display filter field starts with "prismd.".
--
-- Design rules, because a dissector is run on hostile and broken captures:
--   * Every read is bounds-checked against the captured bytes first; a length that does
--     not match (truncation, Body Length, group/element counts, extension lengths) becomes
--     expert info (group "Malformed"), never a Lua error.
--   * The whole dissection runs under pcall: a bug in this file shows up as the expert
--     item prismd.expert.internal instead of aborting the packet, and the part of the
--     tree built so far is kept.
--   * Header integers are big-endian (tree:add); NumberGroup values are little-endian
--     (TvbRange:le_float for FP32 and KULISCH_F64, decoded by hand for FP16/BF16/Kulisch) and
--     are shown as double fields, so no FP16/BF16/FP32 value is rounded for display; a
--     KULISCH_F64 value, which Wireshark prints with 15 digits, also shows its bit pattern.
--   * Expert info mirrors package parser: a frame gets prismd.expert.* items exactly when
--     a prismd node would reject it on its bytes alone (deploy/wireshark/robust_test.go
--     checks this on random corruptions). Rules that need the operation's STAGE state
--     (Vector Length, operation MTU and Kulisch width, tenant match) are not checked.
--   * Only arithmetic, no bit32/bit ops: Lua 5.2 (Wireshark 4.0) today, and nothing that
--     newer Lua versions removed.

local prismd = Proto("prismd", "PRISM in-network collectives (prismd)")

---------------------------------------------------------------------------------------
-- Assigned numbers (docs/protocol.md sections 2, 5, 6, 7, 8)
---------------------------------------------------------------------------------------

local ETHERTYPE = 0x88B5
local VERSION_MAJOR = 1

local CLASS_CONTROL, CLASS_DATA, CLASS_RESULT, CLASS_PROGRESS = 1, 2, 3, 4
local vs_class = { [0] = "INVALID", [1] = "CONTROL", [2] = "DATA", [3] = "RESULT", [4] = "PROGRESS" }

local CMD_STAGE, CMD_COMMIT, CMD_COMPLETE, CMD_RELEASE = 1, 2, 3, 4
local CMD_ACK, CMD_ABORT, CMD_CAPS_QUERY, CMD_CAPS_RESPONSE = 5, 6, 7, 8
local vs_cmd = {
    [1] = "STAGE", [2] = "COMMIT", [3] = "COMPLETE", [4] = "RELEASE",
    [5] = "ACK", [6] = "ABORT", [7] = "CAPS_QUERY", [8] = "CAPS_RESPONSE",
}

local vs_status = {
    [0] = "OK", [1] = "INVALID", [2] = "UNSUPPORTED", [3] = "NO_RESOURCES",
    [4] = "BAD_STATE", [5] = "STALE_GENERATION", [6] = "CONFLICT", [7] = "INVALID_BINDING",
}

local vs_role = { [1] = "SINGLE", [2] = "LEAF", [3] = "INTERNAL", [4] = "ROOT" }
local vs_collective = { [1] = "REDUCE", [2] = "ALLREDUCE", [3] = "BITMAP" }

local FMT_INT8, FMT_FP16, FMT_BF16, FMT_FP32, FMT_KULISCH, FMT_AUTO = 1, 2, 3, 4, 5, 6
local FMT_KULISCH_SCALED = 7
local FMT_KULISCH_F64 = 8
-- Formats and policies (STAGE, capability records): 1..6.
local vs_format = {
    [1] = "INT8", [2] = "FP16", [3] = "BF16", [4] = "FP32", [5] = "KULISCH", [6] = "AUTO",
}
-- Format codes of a NumberGroup descriptor: AUTO never appears there, and 7
-- (KULISCH_SCALED) and 8 (KULISCH_F64) only there, in a switch's partials
-- (DATA without EXT).
local vs_group_format = {
    [1] = "INT8", [2] = "FP16", [3] = "BF16", [4] = "FP32", [5] = "KULISCH", [6] = "AUTO", [7] = "KULISCH_SCALED",
    [8] = "KULISCH_F64",
}
local SCALE_WORD_LEN = 4
local MAX_SCALED_BITS = 4096 -- Shift + 8B <= W <= 4096
local vs_acc_policy = { [1] = "FP32_ARRIVAL", [3] = "KULISCH_FIXED" }

local vs_op_state = {
    [0] = "NONE", [1] = "STAGED", [2] = "ACTIVE", [3] = "COMPLETE",
    [4] = "FAILED", [5] = "RELEASED", [6] = "ABORTED",
}

-- ACK Failure Cause (section 5.2): nonzero only with Operation State FAILED.
local vs_fail_cause = { [0] = "NONE", [1] = "TIMEOUT", [2] = "PEER_FAILED", [3] = "INTERNAL", [4] = "LINK_DOWN" }

local vs_binding_kind = { [1] = "CONTRIBUTOR", [2] = "PARENT", [3] = "RESULT_IN", [4] = "RESULT_OUT" }

local ENC_FLAT, ENC_HIER, ENC_LIST = 1, 2, 3
local vs_encoding = { [1] = "FLAT", [2] = "HIER", [3] = "LIST" }

local vs_kulisch_state = { [0] = "FINITE", [1] = "+0", [2] = "-0", [3] = "+inf", [4] = "-inf", [5] = "NaN" }

local vs_prog_status = {
    [0] = "OK", [1] = "DUPLICATE", [2] = "INVALID", [3] = "NO_CREDIT",
    [4] = "UNKNOWN_OPERATION", [5] = "FAILED",
}


-- Data flags (section 6).
local DF_LAST, DF_INEXACT, DF_EXT, DF_RETRANSMIT, DF_PUSH, DF_RESERVED = 0x01, 0x02, 0x04, 0x08, 0x10, 0xE0
-- Extension xflags (section 8).
local XF_INSTALL, XF_PARTIAL, XF_AUTH, XF_RESERVED = 0x01, 0x02, 0x04, 0xF8
-- PROGRESS flags (section 7).
local PF_RESULT, PF_COMPLETE, PF_RESERVED = 0x01, 0x02, 0xFC
-- Binding flags (section 5.1).
local BF_RANK, BF_RESERVED = 0x01, 0xFE

local CTRL_HDR_LEN = 32
local DATA_HDR_LEN = 40
local PROG_HDR_LEN = 44
local STAGE_CTX_LEN = 40
local BINDING_LEN = 16
local ACK_LEN = 16
local CAPS_QUERY_LEN = 4
local CAPS_PAGE_LEN = 12
local CAPS_RECORD_LEN = 32
local EXT_HDR_LEN = 16
local AUTH_TAG_LEN = 16
local HOLE_LEN = 8
local MAX_HOLES = 32
local MAX_CAPS_RECORDS = 16

---------------------------------------------------------------------------------------
-- Fields
---------------------------------------------------------------------------------------

local f = {}
local function uint8(abbr, name, vs, mask, base_) return ProtoField.uint8(abbr, name, base_ or base.DEC, vs, mask) end
local function uint16(abbr, name, vs, mask, base_) return ProtoField.uint16(abbr, name, base_ or base.DEC, vs, mask) end
local function uint32(abbr, name, vs, base_) return ProtoField.uint32(abbr, name, base_ or base.DEC, vs) end
local function hex8(abbr, name) return ProtoField.uint8(abbr, name, base.HEX) end
local function hex16(abbr, name) return ProtoField.uint16(abbr, name, base.HEX) end
local function hex32(abbr, name) return ProtoField.uint32(abbr, name, base.HEX) end
local function flag(abbr, name, bits, mask) return ProtoField.bool(abbr, name, bits, nil, mask) end

-- Control word and operation identity.
f.version       = hex8("prismd.version", "Version")
f.version_major = uint8("prismd.version_major", "Major version", nil, 0xF0)
f.version_minor = uint8("prismd.version_minor", "Minor version", nil, 0x0F)
f.class         = uint8("prismd.class", "Class", vs_class)
f.job           = ProtoField.uint64("prismd.job", "Job ID", base.HEX)
f.group         = uint16("prismd.group", "Group ID")
f.group_gen     = uint16("prismd.group_gen", "Group Generation")
f.op            = uint16("prismd.op", "Operation ID")
f.op_gen        = uint32("prismd.op_gen", "Operation Generation")
f.padding       = ProtoField.bytes("prismd.padding", "Ethernet padding")
f.unparsed      = ProtoField.bytes("prismd.unparsed", "Undecoded bytes")

-- CONTROL header.
f.ctl_txn        = hex32("prismd.ctl.txn", "Transaction ID")
f.ctl_src_ep     = uint16("prismd.ctl.src_ep", "Source Endpoint")
f.ctl_dst_ep     = uint16("prismd.ctl.dst_ep", "Destination Endpoint")
f.ctl_cmd        = uint8("prismd.ctl.cmd", "Command", vs_cmd)
f.ctl_status     = uint8("prismd.ctl.status", "Status", vs_status)
f.ctl_body_len   = uint16("prismd.ctl.body_len", "Body Length")
f.ctl_frag_index = uint8("prismd.ctl.frag_index", "Fragment Index")
f.ctl_frag_count = uint8("prismd.ctl.frag_count", "Fragment Count")
f.ctl_body       = ProtoField.bytes("prismd.ctl.body", "Body")

-- STAGE context record.
f.st_role             = uint8("prismd.stage.role", "Role", vs_role)
f.st_collective       = uint8("prismd.stage.collective", "Collective", vs_collective)
f.st_input_format     = uint8("prismd.stage.input_format", "Input Format", vs_format)
f.st_acc_policy       = uint8("prismd.stage.acc_policy", "Accumulator Policy", vs_acc_policy, nil, base.HEX)
f.st_partial_policy   = uint8("prismd.stage.partial_policy", "Partial Policy", vs_format)
f.st_output_format    = uint8("prismd.stage.output_format", "Output Format", vs_format)
f.st_kulisch_width    = uint16("prismd.stage.kulisch_width", "Kulisch Width (bits)")
f.st_vector_len       = uint32("prismd.stage.vector_len", "Vector Length")
f.st_mtu              = uint16("prismd.stage.mtu", "MTU")
f.st_binding_count    = uint8("prismd.stage.binding_count", "Binding Count")
f.st_set_count        = uint8("prismd.stage.set_count", "Set Record Count")
f.st_window_intervals = uint16("prismd.stage.window_intervals", "Window Intervals")
f.st_replay_depth     = uint16("prismd.stage.replay_depth", "Replay Depth")
f.st_window_bytes     = uint32("prismd.stage.window_bytes", "Window Bytes")
f.st_window_elements  = uint32("prismd.stage.window_elements", "Window Elements")
f.st_max_terms        = uint32("prismd.stage.max_terms", "Max Terms")
f.st_timeout          = uint32("prismd.stage.timeout", "Timeout (ms)")
f.st_tenant           = uint32("prismd.stage.tenant", "Tenant ID")

-- STAGE bindings.
f.b_index      = uint8("prismd.binding.index", "Binding Index")
f.b_kind       = uint8("prismd.binding.kind", "Kind", vs_binding_kind)
f.b_flags      = hex8("prismd.binding.flags", "Flags")
f.b_flags_rank = flag("prismd.binding.flags.rank", "RANK", 8, BF_RANK)
f.b_flags_res  = uint8("prismd.binding.flags.reserved", "Reserved flags", nil, BF_RESERVED, base.HEX)
f.b_stream     = uint16("prismd.binding.stream", "Stream ID")
f.b_local_ep   = uint16("prismd.binding.local_ep", "Local Endpoint")
f.b_peer_ep    = uint16("prismd.binding.peer_ep", "Peer Endpoint")
f.b_port       = uint16("prismd.binding.port", "Port")
f.b_peer_mac   = ProtoField.ether("prismd.binding.peer_mac", "Peer MAC")

-- STAGE set records (the endpoint set inside uses the prismd.setrec.* body fields).
f.sr_binding_index = uint8("prismd.setrec.binding_index", "Binding Index")
f.sr_reserved      = hex8("prismd.setrec.reserved", "Reserved")
f.sr_length        = uint16("prismd.setrec.length", "Endpoint Set Length")
f.sr_encoding      = uint8("prismd.setrec.encoding", "Encoding", vs_encoding)
f.sr_enc_reserved  = ProtoField.uint24("prismd.setrec.enc_reserved", "Reserved", base.HEX)

-- ACK body.
f.ack_cmd            = uint8("prismd.ack.cmd", "Acked Command", vs_cmd)
f.ack_state          = uint8("prismd.ack.state", "Operation State", vs_op_state)
f.ack_detail         = uint16("prismd.ack.detail", "Detail (offset in request body)")
f.ack_completed      = uint32("prismd.ack.completed", "Completed Elements")
f.ack_missing_stream = uint16("prismd.ack.missing_stream", "Missing Stream")
f.ack_fail_cause     = uint8("prismd.ack.fail_cause", "Failure Cause", vs_fail_cause)
f.ack_reserved       = hex8("prismd.ack.reserved", "Reserved")
f.ack_missing_from   = uint32("prismd.ack.missing_from", "Missing From")

-- CAPS_QUERY body.
f.cq_page     = uint8("prismd.capsq.page", "Page")
f.cq_reserved = ProtoField.uint24("prismd.capsq.reserved", "Reserved", base.HEX)

-- CAPS_RESPONSE page and capability records.
f.caps_record_count = uint8("prismd.caps.record_count", "Record Count")
f.caps_reserved     = hex8("prismd.caps.reserved", "Reserved")
f.caps_port_count   = uint16("prismd.caps.port_count", "Port Count")
f.caps_max_mtu      = uint16("prismd.caps.max_mtu", "Max MTU")
f.caps_max_ops      = uint16("prismd.caps.max_ops", "Max Operations")
f.caps_reserved2    = hex32("prismd.caps.reserved2", "Reserved")
f.cap_input_format        = uint8("prismd.cap.input_format", "Input Format", vs_format)
f.cap_acc_policy          = uint8("prismd.cap.acc_policy", "Accumulator Policy", vs_acc_policy, nil, base.HEX)
f.cap_partial_policy      = uint8("prismd.cap.partial_policy", "Partial Policy", vs_format)
f.cap_output_format       = uint8("prismd.cap.output_format", "Output Format", vs_format)
f.cap_min_kulisch_width   = uint16("prismd.cap.min_kulisch_width", "Min Kulisch Width")
f.cap_max_kulisch_width   = uint16("prismd.cap.max_kulisch_width", "Max Kulisch Width")
f.cap_max_vector_len      = uint32("prismd.cap.max_vector_len", "Max Vector Length")
f.cap_max_terms           = uint32("prismd.cap.max_terms", "Max Terms")
f.cap_max_mtu             = uint16("prismd.cap.max_mtu", "Max MTU")
f.cap_max_bindings        = uint16("prismd.cap.max_bindings", "Max Bindings")
f.cap_max_window_intervals = uint16("prismd.cap.max_window_intervals", "Max Window Intervals")
f.cap_max_replay_depth    = uint16("prismd.cap.max_replay_depth", "Max Replay Depth")
f.cap_max_window_bytes    = uint32("prismd.cap.max_window_bytes", "Max Window Bytes")
f.cap_max_window_elements = uint32("prismd.cap.max_window_elements", "Max Window Elements")

-- DATA / RESULT header.
f.d_src_ep        = uint16("prismd.data.src_ep", "Source Endpoint")
f.d_dst_ep        = uint16("prismd.data.dst_ep", "Destination Endpoint")
f.d_packet_id     = uint32("prismd.data.packet_id", "Packet ID")
f.d_first         = uint32("prismd.data.first", "First Element")
f.d_count         = uint16("prismd.data.count", "Element Count")
f.d_groups        = uint8("prismd.data.groups", "Group Count")
f.d_flags         = hex8("prismd.data.flags", "Flags")
f.d_flags_last    = flag("prismd.data.flags.last", "LAST", 8, DF_LAST)
f.d_flags_inexact = flag("prismd.data.flags.inexact", "ACCUMULATION_INEXACT", 8, DF_INEXACT)
f.d_flags_ext     = flag("prismd.data.flags.ext", "EXT", 8, DF_EXT)
f.d_flags_retx    = flag("prismd.data.flags.retransmit", "RETRANSMIT", 8, DF_RETRANSMIT)
f.d_flags_push    = flag("prismd.data.flags.push", "PUSH", 8, DF_PUSH)
f.d_flags_res     = uint8("prismd.data.flags.reserved", "Reserved flags", nil, DF_RESERVED, base.HEX)
f.d_body_len      = uint16("prismd.data.body_len", "Body Length")
f.d_stream        = uint16("prismd.data.stream", "Stream ID")
f.d_reserved      = hex16("prismd.data.reserved", "Reserved")

-- Endpoint-set bodies: one family under prismd.ext.* (DATA/RESULT extension) and one
-- under prismd.setrec.* (STAGE set records), so a filter says which one it means.
local function set_body_fields(prefix)
    return {
        set_id        = uint16(prefix .. ".set_id", "Set ID"),
        word_count    = uint16(prefix .. ".word_count", "Word Count"),
        bitmap        = ProtoField.bytes(prefix .. ".bitmap", "Bitmap"),
        block_bits    = uint16(prefix .. ".block_bits", "Block Bits"),
        block_count   = uint16(prefix .. ".block_count", "Block Count"),
        upper         = ProtoField.bytes(prefix .. ".upper", "Upper bitmap"),
        lower         = ProtoField.bytes(prefix .. ".lower", "Lower bitmap"),
        lower_block   = uint16(prefix .. ".lower_block", "Block"),
        list_count    = uint16(prefix .. ".list_count", "Count"),
        list_reserved = hex16(prefix .. ".list_reserved", "Reserved"),
        member        = ProtoField.uint64(prefix .. ".member", "Member Endpoint", base.DEC),
        member_count  = ProtoField.uint32(prefix .. ".member_count", "Member count", base.DEC),
    }
end
local fx = set_body_fields("prismd.ext")
local fs = set_body_fields("prismd.setrec")

-- Endpoint-set extension header.
f.x_length      = uint16("prismd.ext.length", "Extension Length")
f.x_encoding    = uint8("prismd.ext.encoding", "Encoding", vs_encoding)
f.x_xflags      = hex8("prismd.ext.xflags", "XFlags")
f.x_xf_install  = flag("prismd.ext.xflags.install", "INSTALL", 8, XF_INSTALL)
f.x_xf_partial  = flag("prismd.ext.xflags.partial", "PARTIAL", 8, XF_PARTIAL)
f.x_xf_auth     = flag("prismd.ext.xflags.auth", "AUTH", 8, XF_AUTH)
f.x_xf_reserved = uint8("prismd.ext.xflags.reserved", "Reserved xflags", nil, XF_RESERVED, base.HEX)
f.x_tenant      = uint32("prismd.ext.tenant", "Tenant ID")
f.x_token       = ProtoField.uint64("prismd.ext.token", "Token / Sequence", base.DEC)
f.x_auth_tag    = ProtoField.bytes("prismd.ext.auth_tag", "Auth tag")

-- NumberGroups.
f.ng               = ProtoField.none("prismd.ng", "NumberGroup")
f.ng_count         = uint16("prismd.ng.count", "Count")
f.ng_format_word   = hex16("prismd.ng.format_word", "Format Word")
f.ng_format        = uint16("prismd.ng.format", "Format", vs_group_format, 0xF000)
f.ng_kulisch_bytes = uint16("prismd.ng.kulisch_bytes", "Kulisch integer bytes (W/8; B for KULISCH_SCALED)", nil, 0x0FFF)
f.ng_scale_word    = ProtoField.none("prismd.ng.scale_word", "Scale Word")
f.ng_scale_shift   = uint16("prismd.ng.scale_shift", "Shift (value = integer x 2^Shift units of 2^-149)")
f.ng_scale_res     = hex16("prismd.ng.scale_reserved", "Reserved")
f.ng_position      = uint32("prismd.ng.position", "First element position")
f.ng_value_int8    = ProtoField.int8("prismd.ng.value_int8", "INT8 value", base.DEC)
f.ng_value_fp16    = ProtoField.double("prismd.ng.value_fp16", "FP16 value")
f.ng_value_bf16    = ProtoField.double("prismd.ng.value_bf16", "BF16 value")
f.ng_value_fp32    = ProtoField.double("prismd.ng.value_fp32", "FP32 value")
f.ng_value_f64     = ProtoField.double("prismd.ng.value_f64", "KULISCH_F64 value")
f.ng_kulisch       = ProtoField.none("prismd.ng.kulisch", "Kulisch value")
f.ng_kulisch_state = uint8("prismd.ng.kulisch_state", "State", vs_kulisch_state)
f.ng_kulisch_int   = ProtoField.string("prismd.ng.kulisch_int", "Integer (units of 2^-149)")
f.ng_scaled_int    = ProtoField.string("prismd.ng.scaled_int", "Integer (units of 2^(Shift-149))")
f.ng_pad           = ProtoField.bytes("prismd.ng.pad", "Value padding")

-- PROGRESS.
f.p_src_ep           = uint16("prismd.prog.src_ep", "Source Endpoint")
f.p_dst_ep           = uint16("prismd.prog.dst_ep", "Destination Endpoint")
f.p_stream           = uint16("prismd.prog.stream", "Stream ID")
f.p_packet_id        = uint32("prismd.prog.packet_id", "Packet ID")
f.p_committed        = uint32("prismd.prog.committed", "Committed Element")
f.p_interval_credits = uint16("prismd.prog.interval_credits", "Interval Credits")
f.p_byte_credits     = uint32("prismd.prog.byte_credits", "Byte Credits")
f.p_status           = uint8("prismd.prog.status", "Status", vs_prog_status)
f.p_flags            = hex8("prismd.prog.flags", "Flags")
f.p_flags_result     = flag("prismd.prog.flags.result", "RESULT", 8, PF_RESULT)
f.p_flags_complete   = flag("prismd.prog.flags.complete", "COMPLETE", 8, PF_COMPLETE)
f.p_flags_res        = uint8("prismd.prog.flags.reserved", "Reserved flags", nil, PF_RESERVED, base.HEX)
f.p_holes            = uint16("prismd.prog.holes", "Hole Count")
f.p_fail_cause       = uint8("prismd.prog.fail_cause", "Failure Cause", vs_fail_cause)
f.p_fail_hops        = uint8("prismd.prog.fail_hops", "Failure Hops")
f.p_hole             = ProtoField.none("prismd.prog.hole", "Hole")
f.p_hole_start       = uint32("prismd.prog.hole.start", "Start")
f.p_hole_end         = uint32("prismd.prog.hole.end", "End")

local all_fields = {}
for _, v in pairs(f) do all_fields[#all_fields + 1] = v end
for _, v in pairs(fx) do all_fields[#all_fields + 1] = v end
for _, v in pairs(fs) do all_fields[#all_fields + 1] = v end
prismd.fields = all_fields

-- Expert info. "Malformed" items are what a prismd node would count and drop.
local e = {
    malformed = ProtoExpert.new("prismd.expert.malformed", "Malformed prismd frame",
        expert.group.MALFORMED, expert.severity.ERROR),
    truncated = ProtoExpert.new("prismd.expert.truncated", "Truncated prismd frame",
        expert.group.MALFORMED, expert.severity.ERROR),
    length = ProtoExpert.new("prismd.expert.length", "Length mismatch",
        expert.group.MALFORMED, expert.severity.ERROR),
    reserved = ProtoExpert.new("prismd.expert.reserved", "Reserved field is nonzero",
        expert.group.PROTOCOL, expert.severity.WARN),
    version = ProtoExpert.new("prismd.expert.version", "Incompatible major version",
        expert.group.PROTOCOL, expert.severity.ERROR),
    unknown = ProtoExpert.new("prismd.expert.unknown", "Unassigned value",
        expert.group.UNDECODED, expert.severity.WARN),
    rule = ProtoExpert.new("prismd.expert.rule", "Protocol rule violated",
        expert.group.PROTOCOL, expert.severity.WARN),
    internal = ProtoExpert.new("prismd.expert.internal", "prismd dissector internal error",
        expert.group.MALFORMED, expert.severity.ERROR),
    -- The frame was whole on the wire; the capture kept fewer bytes (tshark -s):
    -- not something a node would drop, so not "malformed".
    snaplen = ProtoExpert.new("prismd.expert.snaplen", "Capture cut by the snapshot length",
        expert.group.UNDECODED, expert.severity.NOTE),
}
prismd.experts = { e.malformed, e.truncated, e.length, e.reserved, e.version, e.unknown, e.rule, e.internal, e.snaplen }

---------------------------------------------------------------------------------------
-- Helpers
---------------------------------------------------------------------------------------

-- Dissection context: the tvb, its captured length and the packet's top tree item.
-- have(c, off, n) is the single bounds check every read goes through.
local function have(c, off, n)
    return off >= 0 and n >= 0 and off + n <= c.len
end

local function truncated(c, tree, what, off, n)
    if off >= 0 and n >= 0 and off + n <= c.wire then
        -- The bytes were on the wire: the capture's snapshot length cut them.
        tree:add_proto_expert_info(e.snaplen,
            string.format("Not captured: %s needs %d bytes at offset %d; the frame had %d bytes, the capture kept %d (snapshot length)",
                what, n, off, c.wire, c.len))
        c.cut = true
        return
    end
    if c.cut then
        return -- after a cut, what is missing is the capture's doing
    end
    tree:add_proto_expert_info(e.truncated,
        string.format("Truncated: %s needs %d bytes at offset %d, only %d captured",
            what, n, off, math.max(c.len - off, 0)))
    c.malformed = true
end

local function malformed(c, tree, expert_field, text)
    if c.cut and expert_field == e.length then
        -- Lengths that do not add up once the capture cut the frame: the
        -- missing bytes were on the wire, so no verdict.
        return
    end
    tree:add_proto_expert_info(expert_field, text)
    c.malformed = true
end

local function check_reserved(c, item, value, what)
    if value ~= 0 then
        item:add_proto_expert_info(e.reserved, string.format("%s is nonzero (0x%x): a prismd node drops this frame", what, value))
        c.malformed = true
    end
end

-- Flags an enum value that has no assigned name (Wireshark shows "Unknown").
local function check_vs(c, item, vs, v, what)
    if vs[v] == nil then
        item:add_proto_expert_info(e.unknown, string.format("unassigned %s %d", what, v))
        c.malformed = true
    end
end

-- Adds a 1-byte enum field at off and checks that its value is assigned.
local function add_enum(c, tree, field, off, vs, what)
    local it = tree:add(field, c.tvb(off, 1))
    check_vs(c, it, vs, c.tvb(off, 1):uint(), what)
    return it
end

-- Input formats are the rank formats 1..4: a rank never sends KULISCH, and AUTO
-- is a policy.
local function add_input_format(c, tree, field, off)
    local it = add_enum(c, tree, field, off, vs_format, "input format")
    local v = c.tvb(off, 1):uint()
    if v == FMT_KULISCH or v == FMT_AUTO then
        it:add_proto_expert_info(e.rule, "Input Format must be INT8, FP16, BF16 or FP32")
        c.malformed = true
    end
end

local function u8(c, off) return c.tvb(off, 1):uint() end
local function u16(c, off) return c.tvb(off, 2):uint() end
local function u32(c, off) return c.tvb(off, 4):uint() end

local function pad4(n) return math.ceil(n / 4) * 4 end

-- Bit test without bit ops: is the bit with value mask (a power of two) set in v?
local function has_bit(v, mask) return math.floor(v / mask) % 2 == 1 end

-- IEEE binary16 and bfloat16 from their bit patterns.
local function half_to_number(h)
    local sign = (h >= 0x8000) and -1 or 1
    local exp = math.floor(h / 0x400) % 0x20
    local mant = h % 0x400
    if exp == 0 then
        return sign * mant * 2 ^ -24
    elseif exp == 0x1F then
        if mant == 0 then return sign * math.huge end
        return 0 / 0
    end
    return sign * (1 + mant / 1024) * 2 ^ (exp - 15)
end

local function bf16_to_number(b)
    local sign = (b >= 0x8000) and -1 or 1
    local exp = math.floor(b / 0x80) % 0x100
    local mant = b % 0x80
    if exp == 0 then
        return sign * mant * 2 ^ -133 -- 2^-126 * mant/128
    elseif exp == 0xFF then
        if mant == 0 then return sign * math.huge end
        return 0 / 0
    end
    return sign * (1 + mant / 128) * 2 ^ (exp - 127)
end

-- Signed little-endian two's-complement integer of n bytes as "0x..." / "-0x...",
-- without leading zeros ("0x0" for zero). Also reports whether it is zero.
local function le_signed_hex(c, off, n)
    local b = {}
    for i = 0, n - 1 do b[i + 1] = u8(c, off + i) end
    local neg = b[n] >= 0x80
    if neg then
        -- negate: invert and add one, carrying from the least significant byte
        local carry = 1
        for i = 1, n do
            local v = 255 - b[i] + carry
            if v >= 256 then v = v - 256; carry = 1 else carry = 0 end
            b[i] = v
        end
    end
    local parts = {}
    local started = false
    for i = n, 1, -1 do
        if started then
            parts[#parts + 1] = string.format("%02x", b[i])
        elseif b[i] ~= 0 then
            parts[#parts + 1] = string.format("%x", b[i])
            started = true
        end
    end
    if not started then return "0x0", true end
    return (neg and "-0x" or "0x") .. table.concat(parts), false
end

local function vs_name(vs, v)
    return vs[v] or string.format("Unknown(%d)", v)
end

---------------------------------------------------------------------------------------
-- Common pieces
---------------------------------------------------------------------------------------

-- Operation identity (section 3), 18 bytes at off.
local function dissect_op_identity(c, tree, off)
    tree:add(f.job, c.tvb(off, 8))
    tree:add(f.group, c.tvb(off + 8, 2))
    tree:add(f.group_gen, c.tvb(off + 10, 2))
    tree:add(f.op, c.tvb(off + 12, 2))
    tree:add(f.op_gen, c.tvb(off + 14, 4))
    return string.format("job=0x%s grp=%d/%d op=%d/%d",
        c.tvb(off, 8):uint64():tohex():gsub("^0+(.)", "%1"), u16(c, off + 8), u16(c, off + 10),
        u16(c, off + 12), u32(c, off + 14))
end

-- Adds each set bit of a bitmap (MSB-first within each byte, section 8) as a member
-- endpoint base + bit index. Returns the number of members added.
local function add_bitmap_members(c, tree, F, off, nbytes, base_id)
    local n = 0
    for i = 0, nbytes - 1 do
        local byte = u8(c, off + i)
        if byte ~= 0 then
            for bit = 0, 7 do
                if has_bit(byte, 2 ^ (7 - bit)) then
                    local id = base_id + i * 8 + bit
                    tree:add(F.member, c.tvb(off + i, 1), UInt64.new(id % 4294967296, math.floor(id / 4294967296)))
                    n = n + 1
                end
            end
        end
    end
    return n
end

-- Endpoint set body (section 8) of exactly n bytes at off, encoding enc, into tree
-- with field family F. Reports every length that does not add up to n.
local function dissect_set_body(c, tree, F, enc, off, n, list_cap)
    if not have(c, off, n) then
        truncated(c, tree, "endpoint set body", off, n)
        n = math.max(c.len - off, 0)
    end
    local members = 0
    if enc == ENC_FLAT then
        if n < 4 then
            malformed(c, tree, e.length, string.format("FLAT set body of %d bytes is shorter than its 4-byte header", n))
            return
        end
        local set_id, words = u16(c, off), u16(c, off + 2)
        local sii = tree:add(F.set_id, c.tvb(off, 2))
        if (set_id + 1) * words * 64 > 2 ^ 32 then
            malformed(c, sii, e.rule, "FLAT set reaches past endpoint 2^32 - 1: (Set ID + 1) x Word Count x 64 > 2^32")
        end
        tree:add(F.word_count, c.tvb(off + 2, 2))
        local want = 4 + words * 8
        if want ~= n then
            malformed(c, tree, e.length, string.format("FLAT set: Word Count %d needs %d bytes, body has %d", words, want, n))
        end
        local bytes = math.min(words * 8, n - 4)
        if bytes > 0 then
            local bt = tree:add(F.bitmap, c.tvb(off + 4, bytes))
            members = add_bitmap_members(c, bt, F, off + 4, bytes, set_id * words * 64)
        end
    elseif enc == ENC_HIER then
        if n < 4 then
            malformed(c, tree, e.length, string.format("HIER set body of %d bytes is shorter than its 4-byte header", n))
            return
        end
        local block_bits, blocks = u16(c, off), u16(c, off + 2)
        local bbi = tree:add(F.block_bits, c.tvb(off, 2))
        tree:add(F.block_count, c.tvb(off + 2, 2))
        if block_bits == 0 or block_bits % 64 ~= 0 then
            malformed(c, bbi, e.malformed, string.format("Block Bits %d is not a nonzero multiple of 64", block_bits))
            return
        end
        local upper_len = math.ceil(blocks / 64) * 8
        local lower_len = block_bits / 8
        local pos = off + 4
        local stop = off + n
        if pos + upper_len > stop then
            malformed(c, tree, e.length, string.format("HIER set: upper bitmap needs %d bytes, %d left", upper_len, stop - pos))
            return
        end
        local ut = tree:add(F.upper, c.tvb(pos, upper_len))
        local upper_off = pos
        pos = pos + upper_len
        for blk = 0, upper_len * 8 - 1 do
            local byte = u8(c, upper_off + math.floor(blk / 8))
            if has_bit(byte, 2 ^ (7 - blk % 8)) then
                if blk >= blocks then
                    malformed(c, ut, e.malformed, string.format("upper bit %d set beyond Block Count %d", blk, blocks))
                    break
                end
                if pos + lower_len > stop then
                    malformed(c, tree, e.length, string.format("HIER set: lower bitmap of block %d needs %d bytes, %d left", blk, lower_len, stop - pos))
                    pos = stop
                    break
                end
                local lt = tree:add(F.lower, c.tvb(pos, lower_len))
                lt:add(F.lower_block, c.tvb(upper_off + math.floor(blk / 8), 1), blk):set_generated()
                local m = add_bitmap_members(c, lt, F, pos, lower_len, blk * block_bits)
                if m == 0 then
                    malformed(c, lt, e.rule, string.format("lower bitmap of block %d is empty although its upper bit is set", blk))
                end
                members = members + m
                pos = pos + lower_len
            end
        end
        if pos ~= stop then
            malformed(c, tree, e.length, string.format("HIER set: bitmaps use %d bytes, body has %d", pos - off, n))
        end
    elseif enc == ENC_LIST then
        if n < 4 then
            malformed(c, tree, e.length, string.format("LIST set body of %d bytes is shorter than its 4-byte header", n))
            return
        end
        local count = u16(c, off)
        local lci = tree:add(F.list_count, c.tvb(off, 2))
        if list_cap ~= nil and count > list_cap then
            malformed(c, lci, e.rule, string.format("LIST Count %d exceeds the job's cap (Max Terms) %d", count, list_cap))
        end
        local ri = tree:add(F.list_reserved, c.tvb(off + 2, 2))
        check_reserved(c, ri, u16(c, off + 2), "LIST reserved field")
        local want = 4 + count * 4
        if want ~= n then
            malformed(c, tree, e.length, string.format("LIST set: Count %d needs %d bytes, body has %d", count, want, n))
        end
        local avail = math.floor((n - 4) / 4)
        local prev = -1
        for i = 0, math.min(count, avail) - 1 do
            local id = u32(c, off + 4 + i * 4)
            local it = tree:add(F.member, c.tvb(off + 4 + i * 4, 4), UInt64.new(id, 0))
            if id <= prev then
                malformed(c, it, e.malformed, "LIST endpoint IDs are not strictly ascending")
            end
            prev = id
            members = members + 1
        end
    else
        malformed(c, tree, e.unknown, string.format("unknown endpoint set encoding %d", enc))
        return
    end
    local mc = tree:add(F.member_count, members)
    mc:set_generated()
    if members == 0 then
        malformed(c, mc, e.rule, "empty endpoint set")
    end
end

---------------------------------------------------------------------------------------
-- CONTROL (section 5)
---------------------------------------------------------------------------------------

local function dissect_stage(c, tree, off, blen)
    local stop = off + blen
    if blen < STAGE_CTX_LEN then
        malformed(c, tree, e.length, string.format("STAGE body of %d bytes is shorter than the %d-byte context record", blen, STAGE_CTX_LEN))
        return
    end
    local ct = tree:add(prismd, c.tvb(off, STAGE_CTX_LEN), "Context record")
    add_enum(c, ct, f.st_role, off, vs_role, "role")
    local colli = add_enum(c, ct, f.st_collective, off + 1, vs_collective, "collective")
    add_input_format(c, ct, f.st_input_format, off + 2)
    add_enum(c, ct, f.st_acc_policy, off + 3, vs_acc_policy, "accumulator policy")
    add_enum(c, ct, f.st_partial_policy, off + 4, vs_format, "partial policy")
    add_enum(c, ct, f.st_output_format, off + 5, vs_format, "output format")
    local kw = u16(c, off + 6)
    local kwi = ct:add(f.st_kulisch_width, c.tvb(off + 6, 2))
    local acc, partial, out = u8(c, off + 3), u8(c, off + 4), u8(c, off + 5)
    local uses_kulisch = acc == 3 or partial == FMT_KULISCH or out == FMT_KULISCH
    if uses_kulisch and (kw % 8 ~= 0 or kw < 64 or kw > 4096) then
        malformed(c, kwi, e.rule, "Kulisch Width must be a multiple of 8 in 64..4096 when a KULISCH policy is used")
    elseif not uses_kulisch and kw ~= 0 then
        malformed(c, kwi, e.rule, "Kulisch Width must be 0 when no KULISCH policy is used")
    end
    local vli = ct:add(f.st_vector_len, c.tvb(off + 8, 4))
    if u32(c, off + 8) == 0 then malformed(c, vli, e.rule, "Vector Length must be >= 1") end
    local mtu = u16(c, off + 12)
    local mtui = ct:add(f.st_mtu, c.tvb(off + 12, 2))
    if mtu ~= 576 and mtu ~= 1500 and mtu ~= 9000 then
        malformed(c, mtui, e.rule, string.format("MTU %d is not one of the defined MTUs 576, 1500, 9000", mtu))
    end
    local bci = ct:add(f.st_binding_count, c.tvb(off + 14, 1))
    local sci = ct:add(f.st_set_count, c.tvb(off + 15, 1))
    if u8(c, off + 14) < 1 or u8(c, off + 14) > 64 then
        malformed(c, bci, e.rule, "Binding Count must be 1..64")
    end
    if u8(c, off + 15) > 64 then
        malformed(c, sci, e.rule, "Set Record Count must be 0..64")
    elseif u8(c, off + 15) > 0 and u8(c, off + 1) ~= 3 then
        malformed(c, sci, e.rule, "set records belong to BITMAP jobs only")
    end
    local wii = ct:add(f.st_window_intervals, c.tvb(off + 16, 2))
    if u16(c, off + 16) == 0 then malformed(c, wii, e.rule, "Window Intervals must be >= 1") end
    local rdi = ct:add(f.st_replay_depth, c.tvb(off + 18, 2))
    if u16(c, off + 18) == 0 then malformed(c, rdi, e.rule, "Replay Depth must be >= 1") end
    local wbi = ct:add(f.st_window_bytes, c.tvb(off + 20, 4))
    if u32(c, off + 20) < mtu then malformed(c, wbi, e.rule, "Window Bytes must be >= MTU") end
    -- One maximal packet at this MTU: a single INT8 group, 4*floor((MTU-46)/4).
    local max_pkt = math.max(math.floor((mtu - 2 - DATA_HDR_LEN - 4) / 4) * 4, 0)
    local wei = ct:add(f.st_window_elements, c.tvb(off + 24, 4))
    if u32(c, off + 24) < max_pkt then
        malformed(c, wei, e.rule, string.format("Window Elements must hold one maximal packet (%d elements at MTU %d)", max_pkt, mtu))
    end
    local terms = u32(c, off + 28)
    local mti = ct:add(f.st_max_terms, c.tvb(off + 28, 4))
    if terms == 0 then malformed(c, mti, e.rule, "Max Terms must be >= 1") end
    -- An exact sum of N FP32-domain terms needs W >= 278 + ceil(log2 N) bits.
    if acc == 3 and uses_kulisch and kw % 8 == 0 and kw >= 64 and kw <= 4096 then
        local log2n = 0
        while 2 ^ log2n < terms do log2n = log2n + 1 end
        if kw < 278 + log2n then
            malformed(c, kwi, e.rule, string.format("KULISCH_FIXED with Max Terms %d needs Kulisch Width >= %d", terms, 278 + log2n))
        end
    end
    local tmo = u32(c, off + 32)
    local toi = ct:add(f.st_timeout, c.tvb(off + 32, 4))
    if tmo < 1 or tmo > 600000 then malformed(c, toi, e.rule, "Timeout must be 1..600000 ms") end
    -- Offset 36 was reserved in the first draft; it now carries the BITMAP job's tenant.
    local tni = ct:add(f.st_tenant, c.tvb(off + 36, 4))
    if u32(c, off + 36) ~= 0 and u8(c, off + 1) ~= 3 then
        malformed(c, tni, e.rule, "Tenant ID must be 0 unless Collective is BITMAP")
    end
    local nbind, nset = u8(c, off + 14), u8(c, off + 15)
    local pos = off + STAGE_CTX_LEN

    for i = 0, nbind - 1 do
        if pos + BINDING_LEN > stop then
            malformed(c, tree, e.length, string.format("Binding Count %d needs %d bytes of bindings, body has room for %d",
                nbind, nbind * BINDING_LEN, stop - off - STAGE_CTX_LEN))
            return
        end
        local bt = tree:add(prismd, c.tvb(pos, BINDING_LEN), string.format("Binding %d: %s stream %d", i,
            vs_name(vs_binding_kind, u8(c, pos)), u16(c, pos + 2)))
        bt:add(f.b_index, i):set_generated()
        add_enum(c, bt, f.b_kind, pos, vs_binding_kind, "binding kind")
        local fl = bt:add(f.b_flags, c.tvb(pos + 1, 1))
        fl:add(f.b_flags_rank, c.tvb(pos + 1, 1))
        local fr = fl:add(f.b_flags_res, c.tvb(pos + 1, 1))
        check_reserved(c, fr, u8(c, pos + 1) - u8(c, pos + 1) % 2, "binding reserved flags")
        bt:add(f.b_stream, c.tvb(pos + 2, 2))
        bt:add(f.b_local_ep, c.tvb(pos + 4, 2))
        bt:add(f.b_peer_ep, c.tvb(pos + 6, 2))
        bt:add(f.b_port, c.tvb(pos + 8, 2))
        bt:add(f.b_peer_mac, c.tvb(pos + 10, 6))
        pos = pos + BINDING_LEN
    end

    local seen_index = {} -- at most one record per Binding Index (protocol 5.1)
    for i = 0, nset - 1 do
        if pos + 4 > stop then
            malformed(c, tree, e.length, string.format("Set Record Count %d: record %d header does not fit in the body", nset, i))
            return
        end
        local slen = u16(c, pos + 2)
        local rec_len = 4 + slen
        local st = tree:add(prismd, c.tvb(pos, math.min(rec_len, stop - pos)), string.format("Set record %d", i))
        local bix = u8(c, pos)
        local bii = st:add(f.sr_binding_index, c.tvb(pos, 1))
        if bix == 0xFF then
            bii:append_text(" (own A-BM)")
        elseif bix == 0xFE then
            bii:append_text(" (boundary set: the node's identity in the enclosing domain)")
        elseif bix < nbind then
            bii:append_text(string.format(" (BIFT mask of binding %d)", bix))
        else
            malformed(c, bii, e.malformed, string.format("Binding Index %d: there are only %d bindings", bix, nbind))
        end
        if seen_index[bix] then
            malformed(c, bii, e.malformed, string.format("Binding Index %d: a second set record for it (at most one per index)", bix))
        end
        seen_index[bix] = true
        local ri2 = st:add(f.sr_reserved, c.tvb(pos + 1, 1))
        check_reserved(c, ri2, u8(c, pos + 1), "set record reserved field")
        local li = st:add(f.sr_length, c.tvb(pos + 2, 2))
        if slen % 4 ~= 0 then
            malformed(c, li, e.length, string.format("endpoint set length %d is not a multiple of 4", slen))
        end
        if pos + rec_len > stop then
            malformed(c, li, e.length, string.format("endpoint set length %d runs past the body end (%d bytes left)", slen, stop - pos - 4))
            return
        end
        if slen < 8 then
            malformed(c, li, e.length, string.format("endpoint set length %d is shorter than the 4-byte encoding prefix plus a 4-byte set header", slen))
        else
            local enc = u8(c, pos + 4)
            st:append_text(": " .. vs_name(vs_encoding, enc))
            st:add(f.sr_encoding, c.tvb(pos + 4, 1)) -- an unknown encoding is flagged by dissect_set_body
            local er = st:add(f.sr_enc_reserved, c.tvb(pos + 5, 3))
            check_reserved(c, er, c.tvb(pos + 5, 3):uint(), "set record encoding reserved field")
            dissect_set_body(c, st, fs, enc, pos + 8, slen - 4, math.min(u32(c, off + 28), 0xFFFF))
        end
        pos = pos + rec_len
    end

    if pos ~= stop then
        malformed(c, tree, e.length, string.format("STAGE records use %d bytes, Body Length says %d", pos - off, blen))
    end
end

local function dissect_ack(c, tree, off, blen)
    if blen ~= ACK_LEN then
        malformed(c, tree, e.length, string.format("ACK body must be %d bytes, Body Length is %d", ACK_LEN, blen))
        if blen < ACK_LEN then return end
    end
    local aci = add_enum(c, tree, f.ack_cmd, off, vs_cmd, "acked command")
    if u8(c, off) == CMD_ACK then
        malformed(c, aci, e.rule, "an ACK does not acknowledge an ACK")
    end
    add_enum(c, tree, f.ack_state, off + 1, vs_op_state, "operation state")
    local di = tree:add(f.ack_detail, c.tvb(off + 2, 2))
    if u16(c, off + 2) == 0xFFFF then di:append_text(" (none)") end
    tree:add(f.ack_completed, c.tvb(off + 4, 4))
    local mi = tree:add(f.ack_missing_stream, c.tvb(off + 8, 2))
    if u16(c, off + 8) == 0xFFFF then mi:append_text(" (none)") end
    local fi = add_enum(c, tree, f.ack_fail_cause, off + 10, vs_fail_cause, "failure cause")
    if u8(c, off + 10) ~= 0 and u8(c, off + 1) ~= 4 then
        malformed(c, fi, e.rule, "a Failure Cause needs Operation State FAILED")
    end
    local ri = tree:add(f.ack_reserved, c.tvb(off + 11, 1))
    check_reserved(c, ri, u8(c, off + 11), "ACK reserved field")
    tree:add(f.ack_missing_from, c.tvb(off + 12, 4))
    return string.format(" acked=%s state=%s", vs_name(vs_cmd, u8(c, off)), vs_name(vs_op_state, u8(c, off + 1)))
end

local function dissect_caps_query(c, tree, off, blen)
    if blen ~= CAPS_QUERY_LEN then
        malformed(c, tree, e.length, string.format("CAPS_QUERY body must be %d bytes, Body Length is %d", CAPS_QUERY_LEN, blen))
        if blen < CAPS_QUERY_LEN then return end
    end
    tree:add(f.cq_page, c.tvb(off, 1))
    local ri = tree:add(f.cq_reserved, c.tvb(off + 1, 3))
    check_reserved(c, ri, c.tvb(off + 1, 3):uint(), "CAPS_QUERY reserved field")
    return string.format(" page=%d", u8(c, off))
end

local function dissect_caps_response(c, tree, off, blen)
    if blen < CAPS_PAGE_LEN then
        malformed(c, tree, e.length, string.format("CAPS_RESPONSE body of %d bytes is shorter than the %d-byte page header", blen, CAPS_PAGE_LEN))
        return
    end
    local n = u8(c, off)
    local ni = tree:add(f.caps_record_count, c.tvb(off, 1))
    if n > MAX_CAPS_RECORDS then
        malformed(c, ni, e.malformed, string.format("Record Count %d exceeds %d", n, MAX_CAPS_RECORDS))
    end
    local r1 = tree:add(f.caps_reserved, c.tvb(off + 1, 1))
    check_reserved(c, r1, u8(c, off + 1), "CAPS page reserved field")
    tree:add(f.caps_port_count, c.tvb(off + 2, 2))
    tree:add(f.caps_max_mtu, c.tvb(off + 4, 2))
    tree:add(f.caps_max_ops, c.tvb(off + 6, 2))
    local r2 = tree:add(f.caps_reserved2, c.tvb(off + 8, 4))
    check_reserved(c, r2, u32(c, off + 8), "CAPS page reserved field")
    local want = CAPS_PAGE_LEN + n * CAPS_RECORD_LEN
    if want ~= blen then
        malformed(c, tree, e.length, string.format("Record Count %d needs a %d-byte body, Body Length is %d", n, want, blen))
    end
    local pos = off + CAPS_PAGE_LEN
    for i = 0, n - 1 do
        if pos + CAPS_RECORD_LEN > off + blen then break end
        local rt = tree:add(prismd, c.tvb(pos, CAPS_RECORD_LEN), string.format("Capability record %d: %s -> %s",
            i, vs_name(vs_format, u8(c, pos)), vs_name(vs_format, u8(c, pos + 3))))
        add_input_format(c, rt, f.cap_input_format, pos)
        add_enum(c, rt, f.cap_acc_policy, pos + 1, vs_acc_policy, "accumulator policy")
        add_enum(c, rt, f.cap_partial_policy, pos + 2, vs_format, "partial policy")
        add_enum(c, rt, f.cap_output_format, pos + 3, vs_format, "output format")
        rt:add(f.cap_min_kulisch_width, c.tvb(pos + 4, 2))
        rt:add(f.cap_max_kulisch_width, c.tvb(pos + 6, 2))
        rt:add(f.cap_max_vector_len, c.tvb(pos + 8, 4))
        rt:add(f.cap_max_terms, c.tvb(pos + 12, 4))
        rt:add(f.cap_max_mtu, c.tvb(pos + 16, 2))
        rt:add(f.cap_max_bindings, c.tvb(pos + 18, 2))
        rt:add(f.cap_max_window_intervals, c.tvb(pos + 20, 2))
        rt:add(f.cap_max_replay_depth, c.tvb(pos + 22, 2))
        rt:add(f.cap_max_window_bytes, c.tvb(pos + 24, 4))
        rt:add(f.cap_max_window_elements, c.tvb(pos + 28, 4))
        pos = pos + CAPS_RECORD_LEN
    end
    return string.format(" records=%d", n)
end

local function dissect_control(c, tree, off)
    if not have(c, off, CTRL_HDR_LEN) then
        truncated(c, tree, "CONTROL header", off, CTRL_HDR_LEN)
        return "CONTROL (truncated)"
    end
    local ht = tree:add(prismd, c.tvb(off, CTRL_HDR_LEN), "CONTROL header")
    local id = dissect_op_identity(c, ht, off)
    ht:add(f.ctl_txn, c.tvb(off + 18, 4))
    ht:add(f.ctl_src_ep, c.tvb(off + 22, 2))
    ht:add(f.ctl_dst_ep, c.tvb(off + 24, 2))
    local cmd, status = u8(c, off + 26), u8(c, off + 27)
    local ci = ht:add(f.ctl_cmd, c.tvb(off + 26, 1))
    local si = ht:add(f.ctl_status, c.tvb(off + 27, 1))
    local blen = u16(c, off + 28)
    local bi = ht:add(f.ctl_body_len, c.tvb(off + 28, 2))
    local fidx, fcnt = u8(c, off + 30), u8(c, off + 31)
    ht:add(f.ctl_frag_index, c.tvb(off + 30, 1))
    local fci = ht:add(f.ctl_frag_count, c.tvb(off + 31, 1))

    if vs_cmd[cmd] == nil then
        malformed(c, ci, e.unknown, string.format("unassigned command %d", cmd))
    end
    if vs_status[status] == nil then
        malformed(c, si, e.unknown, string.format("unassigned status %d", status))
    elseif status ~= 0 and cmd ~= CMD_ACK then
        malformed(c, si, e.rule, "Status must be 0 in every command except ACK")
    end
    if fcnt < 1 or fidx >= fcnt then
        malformed(c, fci, e.malformed, string.format("Fragment Index %d / Count %d: need Count >= 1 and Index < Count", fidx, fcnt))
    elseif fcnt > 1 and cmd ~= CMD_CAPS_RESPONSE then
        malformed(c, fci, e.rule, "only CAPS_RESPONSE may have Fragment Count > 1")
    end

    local info = string.format("CONTROL %s%s txn=0x%x %s", vs_name(vs_cmd, cmd),
        status ~= 0 and (" " .. vs_name(vs_status, status)) or "", u32(c, off + 18), id)
    local body = off + CTRL_HDR_LEN
    local avail = c.len - body
    if blen > avail then
        truncated(c, bi, "CONTROL body (Body Length)", body, blen)
        if avail > 0 then tree:add(f.unparsed, c.tvb(body, avail)) end
        return info
    end
    c.declared_end = body + blen
    if blen == 0 then
        if cmd == CMD_STAGE or cmd == CMD_ACK or cmd == CMD_CAPS_QUERY or cmd == CMD_CAPS_RESPONSE then
            malformed(c, bi, e.length, string.format("%s needs a body, Body Length is 0", vs_name(vs_cmd, cmd)))
        end
        return info
    end
    local bt = tree:add(prismd, c.tvb(body, blen), string.format("%s body", vs_name(vs_cmd, cmd)))
    local extra
    if cmd == CMD_STAGE then
        dissect_stage(c, bt, body, blen)
    elseif cmd == CMD_ACK then
        extra = dissect_ack(c, bt, body, blen)
    elseif cmd == CMD_CAPS_QUERY then
        extra = dissect_caps_query(c, bt, body, blen)
    elseif cmd == CMD_CAPS_RESPONSE then
        extra = dissect_caps_response(c, bt, body, blen)
    else
        bt:add(f.ctl_body, c.tvb(body, blen))
        if vs_cmd[cmd] ~= nil then
            malformed(c, bi, e.length, string.format("%s has an empty body, Body Length is %d", vs_name(vs_cmd, cmd), blen))
        end
    end
    return info .. (extra or "")
end

---------------------------------------------------------------------------------------
-- DATA / RESULT (section 6) with the endpoint-set extension (section 8)
---------------------------------------------------------------------------------------

local function dissect_ext(c, tree, off)
    if not have(c, off, EXT_HDR_LEN) then
        truncated(c, tree, "endpoint-set extension header", off, EXT_HDR_LEN)
        return nil
    end
    local xlen = u16(c, off)
    local xt = tree:add(prismd, c.tvb(off, math.min(math.max(xlen, EXT_HDR_LEN), c.len - off)), "Endpoint-set extension")
    local li = xt:add(f.x_length, c.tvb(off, 2))
    local enc = u8(c, off + 2)
    xt:add(f.x_encoding, c.tvb(off + 2, 1))
    local xflags = u8(c, off + 3)
    local xi = xt:add(f.x_xflags, c.tvb(off + 3, 1))
    xi:add(f.x_xf_install, c.tvb(off + 3, 1))
    xi:add(f.x_xf_partial, c.tvb(off + 3, 1))
    xi:add(f.x_xf_auth, c.tvb(off + 3, 1))
    local xr = xi:add(f.x_xf_reserved, c.tvb(off + 3, 1))
    check_reserved(c, xr, xflags - xflags % 8, "extension reserved xflags")
    xt:add(f.x_tenant, c.tvb(off + 4, 4))
    xt:add(f.x_token, c.tvb(off + 8, 8))
    xt:append_text(": " .. vs_name(vs_encoding, enc))

    if c.class == CLASS_DATA and has_bit(xflags, XF_INSTALL) then
        malformed(c, xi, e.rule, "INSTALL belongs to RESULT (multicast) frames")
    elseif has_bit(xflags, XF_INSTALL) and has_bit(xflags, XF_PARTIAL) then
        malformed(c, xi, e.rule, "PARTIAL marks an aggregate and never rides on an INSTALL dispatch")
    end
    local auth = has_bit(xflags, XF_AUTH)
    local tag = auth and AUTH_TAG_LEN or 0
    if xlen % 4 ~= 0 or xlen < EXT_HDR_LEN + 4 + tag then
        malformed(c, li, e.length, string.format("Extension Length %d must be a multiple of 4 and at least %d", xlen, EXT_HDR_LEN + 4 + tag))
        return nil
    end
    if not have(c, off, xlen) then
        truncated(c, li, "endpoint-set extension (Extension Length)", off, xlen)
        return nil
    end
    local n = xlen - EXT_HDR_LEN - tag
    dissect_set_body(c, xt, fx, enc, off + EXT_HDR_LEN, n)
    if auth then
        xt:add(f.x_auth_tag, c.tvb(off + xlen - AUTH_TAG_LEN, AUTH_TAG_LEN))
    end
    return xlen
end

-- Value width in bytes of a format code; nil for formats that never appear in a group.
local function format_width(fmt, kbytes)
    if fmt == FMT_INT8 then return 1 end
    if fmt == FMT_FP16 or fmt == FMT_BF16 then return 2 end
    if fmt == FMT_FP32 then return 4 end
    if fmt == FMT_KULISCH or fmt == FMT_KULISCH_SCALED then return 1 + kbytes end
    if fmt == FMT_KULISCH_F64 then return 8 end
    return nil
end

-- The KULISCH_F64 rules a receiver that does not know W checks (section 6):
-- no subnormal, no NaN but 0x7FF8000000000000, and a finite nonzero value a
-- multiple of 2^-149. hi and lo are the upper and lower 32 bits of the
-- binary64; returns an error text or nil. Arithmetic only (no bit ops).
local function f64_fault(hi, lo)
    local exp = math.floor(hi / 0x100000) % 0x800
    local fhi = hi % 0x100000 -- fraction bits 51..32; lo holds bits 31..0
    if exp == 0 then
        if fhi ~= 0 or lo ~= 0 then return "binary64 subnormal: not a multiple of 2^-149" end
        return nil
    end
    if exp == 0x7FF then
        if fhi == 0 and lo == 0 then return nil end -- +inf, -inf
        if hi == 0x7FF80000 and lo == 0 then return nil end
        return string.format("NaN 0x%08X%08X is not the one NaN encoding 0x7FF8000000000000", hi, lo)
    end
    -- t = trailing zeros of 2^52 + F; the value's lowest set bit is 2^(E - 1075 + t).
    local t, v, n = 0, lo, 32
    if lo == 0 then t, v, n = 32, fhi + 0x100000, 21 end
    while t < 52 and v % 2 == 0 and n > 0 do
        v = v / 2
        t = t + 1
        n = n - 1
    end
    if exp - 1075 + t < -149 then
        return string.format("not a multiple of 2^-149 (its lowest set bit is 2^%d)", exp - 1075 + t)
    end
    return nil
end

local function add_values(c, gt, fmt, width, pos, count, position, shift)
    for i = 0, count - 1 do
        local vo = pos + i * width
        local it
        if fmt == FMT_INT8 then
            it = gt:add(f.ng_value_int8, c.tvb(vo, 1))
        elseif fmt == FMT_FP16 then
            it = gt:add(f.ng_value_fp16, c.tvb(vo, 2), half_to_number(c.tvb(vo, 2):le_uint()))
        elseif fmt == FMT_BF16 then
            it = gt:add(f.ng_value_bf16, c.tvb(vo, 2), bf16_to_number(c.tvb(vo, 2):le_uint()))
        elseif fmt == FMT_FP32 then
            it = gt:add(f.ng_value_fp32, c.tvb(vo, 4), c.tvb(vo, 4):le_float())
        elseif fmt == FMT_KULISCH_F64 then
            -- The number, and its bit pattern: a display of 15 digits does not
            -- tell 2^-149 from its neighbours, nor one NaN from another.
            local hi, lo = c.tvb(vo + 4, 4):le_uint(), c.tvb(vo, 4):le_uint()
            it = gt:add(f.ng_value_f64, c.tvb(vo, 8), c.tvb(vo, 8):le_float())
            it:append_text(string.format(" (0x%08X%08X)", hi, lo))
            local fault = f64_fault(hi, lo)
            if fault ~= nil then malformed(c, it, e.rule, fault) end
        else -- KULISCH, KULISCH_SCALED
            local state = u8(c, vo)
            local hex, zero = le_signed_hex(c, vo + 1, width - 1)
            it = gt:add(f.ng_kulisch, c.tvb(vo, width))
            local sti = it:add(f.ng_kulisch_state, c.tvb(vo, 1))
            if fmt == FMT_KULISCH_SCALED then
                it:set_text(string.format("Kulisch value: %s %s x 2^%d", vs_name(vs_kulisch_state, state), hex, shift))
                it:add(f.ng_scaled_int, c.tvb(vo + 1, width - 1), hex)
            else
                it:set_text(string.format("Kulisch value: %s %s", vs_name(vs_kulisch_state, state), hex))
                it:add(f.ng_kulisch_int, c.tvb(vo + 1, width - 1), hex)
            end
            if vs_kulisch_state[state] == nil then
                malformed(c, sti, e.unknown, string.format("unassigned Kulisch state %d", state))
            elseif state == 0 and zero then
                malformed(c, sti, e.rule, "FINITE Kulisch value with a zero integer")
            elseif state ~= 0 and not zero then
                malformed(c, sti, e.rule, "non-FINITE Kulisch value with a nonzero integer")
            end
        end
        it:append_text(string.format(" [element %d]", position + i))
    end
end

-- class and ext say whether KULISCH_SCALED and KULISCH_F64 groups are legal (DATA without EXT).
local function dissect_numbergroups(c, tree, off, blen, ngroups, nelems, first, class, ext)
    local stop = off + blen
    local pos = off
    local sum = 0
    local g = 0
    while g < ngroups do
        if pos + 4 > stop then
            malformed(c, tree, e.length, string.format("Group Count %d, but the body (Body Length %d) holds only %d group(s)", ngroups, blen, g))
            break
        end
        local count, fw = u16(c, pos), u16(c, pos + 2)
        local fmt, kbytes = math.floor(fw / 0x1000), fw % 0x1000
        local width = format_width(fmt, kbytes)
        local position = first + sum
        local sl = (fmt == FMT_KULISCH_SCALED) and SCALE_WORD_LEN or 0
        local vlen = width and count * width or 0
        local glen = 4 + pad4(sl + vlen)
        local gt = tree:add(f.ng, c.tvb(pos, math.min(glen, stop - pos)))
        gt:set_text(string.format("NumberGroup %d: %d x %s at element %d", g, count, vs_name(vs_group_format, fmt), position))
        local ci = gt:add(f.ng_count, c.tvb(pos, 2))
        local fwi = gt:add(f.ng_format_word, c.tvb(pos + 2, 2))
        fwi:add(f.ng_format, c.tvb(pos + 2, 2))
        local ki = fwi:add(f.ng_kulisch_bytes, c.tvb(pos + 2, 2))
        gt:add(f.ng_position, position):set_generated()
        if count == 0 then
            malformed(c, ci, e.malformed, "NumberGroup Count must be 1..65535")
        end
        if width == nil then
            malformed(c, fwi, e.unknown, string.format("format code %d cannot appear in a NumberGroup", fmt))
            break
        end
        if fmt == FMT_KULISCH then
            if kbytes < 8 or kbytes > 512 then
                malformed(c, ki, e.malformed, string.format("Kulisch integer byte count %d is outside 8..512", kbytes))
                if kbytes == 0 then break end
            end
        elseif fmt == FMT_KULISCH_SCALED then
            if class ~= CLASS_DATA or ext then
                malformed(c, fwi, e.rule, "KULISCH_SCALED groups are legal only in DATA without EXT (a switch's partials)")
            end
            if kbytes < 1 or kbytes > 512 then
                malformed(c, ki, e.malformed, string.format("KULISCH_SCALED integer byte count B = %d is outside 1..512", kbytes))
                if kbytes == 0 then break end
            end
        else
            if fmt == FMT_KULISCH_F64 and (class ~= CLASS_DATA or ext) then
                malformed(c, fwi, e.rule, "KULISCH_F64 groups are legal only in DATA without EXT (a switch's partials)")
            end
            if kbytes ~= 0 then
                malformed(c, ki, e.malformed, "bits 11..0 of the Format Word must be 0 for non-KULISCH formats")
            end
        end
        pos = pos + 4
        local shift = 0
        if sl > 0 then
            if pos + sl > stop then
                malformed(c, gt, e.length, string.format("the Scale Word needs %d bytes, only %d left in the body", sl, stop - pos))
                pos = stop
                g = g + 1
                break
            end
            local sw = gt:add(f.ng_scale_word, c.tvb(pos, sl))
            shift = u16(c, pos)
            local shi = sw:add(f.ng_scale_shift, c.tvb(pos, 2))
            local sri = sw:add(f.ng_scale_res, c.tvb(pos + 2, 2))
            sw:set_text(string.format("Scale Word: Shift %d", shift))
            check_reserved(c, sri, u16(c, pos + 2), "Scale Word reserved field")
            if shift + 8 * kbytes > MAX_SCALED_BITS then
                malformed(c, shi, e.rule, string.format("Shift %d + 8 x B (%d) exceeds the largest Kulisch width %d",
                    shift, 8 * kbytes, MAX_SCALED_BITS))
            end
            pos = pos + sl
        end
        local fit = math.max(math.min(count, math.floor((stop - pos) / width)), 0)
        add_values(c, gt, fmt, width, pos, fit, position, shift)
        sum = sum + count
        if pos + vlen > stop then
            malformed(c, gt, e.length, string.format("group needs %d value bytes, only %d left in the body: %d of %d values shown",
                vlen, stop - pos, fit, count))
            pos = stop
            g = g + 1
            break
        end
        local padn = pad4(sl + vlen) - sl - vlen
        if padn > 0 then
            if pos + vlen + padn > stop then
                malformed(c, gt, e.length, "value padding runs past the body end")
                pos = stop
                g = g + 1
                break
            end
            local pi = gt:add(f.ng_pad, c.tvb(pos + vlen, padn))
            local nz = false
            for i = 0, padn - 1 do if u8(c, pos + vlen + i) ~= 0 then nz = true end end
            if nz then malformed(c, pi, e.reserved, "value padding is not zero") end
        end
        pos = pos + vlen + padn
        g = g + 1
    end
    if g == ngroups and pos ~= stop then
        malformed(c, tree, e.length, string.format("%d group(s) use %d bytes, Body Length is %d", ngroups, pos - off, blen))
    end
    if sum ~= nelems then
        malformed(c, tree, e.length, string.format("group Counts sum to %d, Element Count is %d", sum, nelems))
    end
end

local function dissect_data(c, tree, off, class)
    local name = vs_class[class]
    if not have(c, off, DATA_HDR_LEN) then
        truncated(c, tree, name .. " header", off, DATA_HDR_LEN)
        return name .. " (truncated)"
    end
    local ht = tree:add(prismd, c.tvb(off, DATA_HDR_LEN), name .. " header")
    local id = dissect_op_identity(c, ht, off)
    ht:add(f.d_src_ep, c.tvb(off + 18, 2))
    ht:add(f.d_dst_ep, c.tvb(off + 20, 2))
    ht:add(f.d_packet_id, c.tvb(off + 22, 4))
    ht:add(f.d_first, c.tvb(off + 26, 4))
    ht:add(f.d_count, c.tvb(off + 30, 2))
    local gi = ht:add(f.d_groups, c.tvb(off + 32, 1))
    local flags = u8(c, off + 33)
    local fi = ht:add(f.d_flags, c.tvb(off + 33, 1))
    fi:add(f.d_flags_last, c.tvb(off + 33, 1))
    fi:add(f.d_flags_inexact, c.tvb(off + 33, 1))
    fi:add(f.d_flags_ext, c.tvb(off + 33, 1))
    fi:add(f.d_flags_retx, c.tvb(off + 33, 1))
    fi:add(f.d_flags_push, c.tvb(off + 33, 1))
    local fr = fi:add(f.d_flags_res, c.tvb(off + 33, 1))
    check_reserved(c, fr, flags - flags % 32, "reserved DATA flags")
    local bi = ht:add(f.d_body_len, c.tvb(off + 34, 2))
    ht:add(f.d_stream, c.tvb(off + 36, 2))
    local ri = ht:add(f.d_reserved, c.tvb(off + 38, 2))
    check_reserved(c, ri, u16(c, off + 38), "DATA header reserved field")

    local pkt, first, nelems = u32(c, off + 22), u32(c, off + 26), u16(c, off + 30)
    local ngroups, blen = u8(c, off + 32), u16(c, off + 34)
    local last, inexact, ext = has_bit(flags, DF_LAST), has_bit(flags, DF_INEXACT), has_bit(flags, DF_EXT)
    local fl = {}
    if last then fl[#fl + 1] = "LAST" end
    if inexact then fl[#fl + 1] = "INEXACT" end
    if ext then fl[#fl + 1] = "EXT" end
    if has_bit(flags, DF_RETRANSMIT) then fl[#fl + 1] = "RETX" end
    if has_bit(flags, DF_PUSH) then fl[#fl + 1] = "PUSH" end
    local info = string.format("%s %s stream=%d pkt=%d elems=[%d,+%d) groups=%d%s", name, id, u16(c, off + 36),
        pkt, first, nelems, ngroups, #fl > 0 and (" [" .. table.concat(fl, ",") .. "]") or "")

    if inexact and (not last or nelems ~= 0 or ngroups ~= 0 or blen ~= 0) then
        malformed(c, fi, e.rule, "ACCUMULATION_INEXACT frames must have LAST=1, 0 elements, 0 groups and 0 body")
    end
    if first + nelems > 4294967295 then
        malformed(c, gi, e.rule, "First Element + Element Count exceeds 2^32 - 1")
    end
    local empty = nelems == 0 and ngroups == 0 and blen == 0
    if not empty and (nelems == 0 or ngroups == 0 or blen == 0) then
        malformed(c, gi, e.length, "Group Count, Element Count and Body Length must be all zero or all nonzero")
    elseif empty and not inexact and not ext then
        malformed(c, gi, e.rule, "an empty payload is only legal for ACCUMULATION_INEXACT or EXT frames")
    end

    local pos = off + DATA_HDR_LEN
    if ext then
        local xlen = dissect_ext(c, tree, pos)
        if xlen == nil then return info end
        pos = pos + xlen
    end
    if blen > c.len - pos then
        truncated(c, bi, "NumberGroups (Body Length)", pos, blen)
        local avail = c.len - pos
        if avail > 0 then
            local bt = tree:add(prismd, c.tvb(pos, avail), "NumberGroups (truncated)")
            dissect_numbergroups(c, bt, pos, avail, ngroups, nelems, first, class, ext)
        end
        return info
    end
    c.declared_end = pos + blen
    if blen > 0 or ngroups > 0 then
        local bt = blen > 0 and tree:add(prismd, c.tvb(pos, blen), "NumberGroups") or tree
        dissect_numbergroups(c, bt, pos, blen, ngroups, nelems, first, class, ext)
    end
    return info
end

---------------------------------------------------------------------------------------
-- PROGRESS (section 7)
---------------------------------------------------------------------------------------

local function dissect_progress(c, tree, off)
    if not have(c, off, PROG_HDR_LEN) then
        truncated(c, tree, "PROGRESS header", off, PROG_HDR_LEN)
        return "PROGRESS (truncated)"
    end
    local ht = tree:add(prismd, c.tvb(off, PROG_HDR_LEN), "PROGRESS header")
    local id = dissect_op_identity(c, ht, off)
    ht:add(f.p_src_ep, c.tvb(off + 18, 2))
    ht:add(f.p_dst_ep, c.tvb(off + 20, 2))
    ht:add(f.p_stream, c.tvb(off + 22, 2))
    ht:add(f.p_packet_id, c.tvb(off + 24, 4))
    ht:add(f.p_committed, c.tvb(off + 28, 4))
    ht:add(f.p_interval_credits, c.tvb(off + 32, 2))
    ht:add(f.p_byte_credits, c.tvb(off + 34, 4))
    local status = u8(c, off + 38)
    local si = ht:add(f.p_status, c.tvb(off + 38, 1))
    if vs_prog_status[status] == nil then
        malformed(c, si, e.unknown, string.format("unassigned PROGRESS status %d", status))
    end
    local flags = u8(c, off + 39)
    local fi = ht:add(f.p_flags, c.tvb(off + 39, 1))
    fi:add(f.p_flags_result, c.tvb(off + 39, 1))
    fi:add(f.p_flags_complete, c.tvb(off + 39, 1))
    local fr = fi:add(f.p_flags_res, c.tvb(off + 39, 1))
    check_reserved(c, fr, flags - flags % 4, "reserved PROGRESS flags")
    local nholes = u16(c, off + 40)
    local hi = ht:add(f.p_holes, c.tvb(off + 40, 2))
    -- Failure Cause and Hops say where a FAILED announcement's failure
    -- began; with any other status both are zero.
    local cause, hops = u8(c, off + 42), u8(c, off + 43)
    local ci = add_enum(c, ht, f.p_fail_cause, off + 42, vs_fail_cause, "failure cause")
    local hi2 = ht:add(f.p_fail_hops, c.tvb(off + 43, 1))
    if status ~= 5 then
        check_reserved(c, ci, cause, "Failure Cause without status FAILED")
        check_reserved(c, hi2, hops, "Failure Hops without status FAILED")
    elseif cause == 0 then
        check_reserved(c, hi2, hops, "Failure Hops without a Failure Cause")
    end
    local committed = u32(c, off + 28)
    local info = string.format("PROGRESS %s %s stream=%d committed=%d holes=%d%s", vs_name(vs_prog_status, status), id,
        u16(c, off + 22), committed, nholes, has_bit(flags, PF_COMPLETE) and " [COMPLETE]" or "")
    if status == 5 and cause ~= 0 then
        info = info .. string.format(" began=%s hops=%d", vs_name(vs_fail_cause, cause), hops)
    end
    if nholes > MAX_HOLES then
        malformed(c, hi, e.malformed, string.format("Hole Count %d exceeds %d", nholes, MAX_HOLES))
    end
    local pos = off + PROG_HDR_LEN
    if not have(c, pos, nholes * HOLE_LEN) then
        truncated(c, hi, "PROGRESS holes (Hole Count)", pos, nholes * HOLE_LEN)
    end
    local prev_end = committed
    for i = 0, nholes - 1 do
        if not have(c, pos, HOLE_LEN) then break end
        local s, en = u32(c, pos), u32(c, pos + 4)
        local ht2 = tree:add(f.p_hole, c.tvb(pos, HOLE_LEN))
        ht2:set_text(string.format("Hole %d: [%d, %d)", i, s, en))
        ht2:add(f.p_hole_start, c.tvb(pos, 4))
        ht2:add(f.p_hole_end, c.tvb(pos + 4, 4))
        if en <= s or s < prev_end then
            malformed(c, ht2, e.rule, "holes must be non-empty, ascending, non-overlapping and start at or after Committed Element")
        end
        prev_end = en
        pos = pos + HOLE_LEN
    end
    c.declared_end = pos
    return info
end

---------------------------------------------------------------------------------------
-- Entry point
---------------------------------------------------------------------------------------

local function dissect(c, pinfo, tree)
    local tvb = c.tvb
    c.item = tree:add(prismd, tvb())
    local t = c.item
    if not have(c, 0, 2) then
        truncated(c, t, "control word", 0, 2)
        return "truncated control word"
    end
    local ver, class = u8(c, 0), u8(c, 1)
    c.class = class
    local vi = t:add(f.version, tvb(0, 1))
    vi:add(f.version_major, tvb(0, 1))
    vi:add(f.version_minor, tvb(0, 1))
    local ci = t:add(f.class, tvb(1, 1))
    local major = math.floor(ver / 16)
    if major ~= VERSION_MAJOR then
        malformed(c, vi, e.version, string.format("major version %d is not %d: a prismd node drops this frame (bad_version)", major, VERSION_MAJOR))
        t:append_text(string.format(", version %d.%d", major, ver % 16))
        if c.len > 2 then t:add(f.unparsed, tvb(2)) end
        return string.format("incompatible version %d.%d", major, ver % 16)
    end
    local info
    if class == CLASS_CONTROL then
        info = dissect_control(c, t, 2)
    elseif class == CLASS_DATA or class == CLASS_RESULT then
        info = dissect_data(c, t, 2, class)
    elseif class == CLASS_PROGRESS then
        info = dissect_progress(c, t, 2)
    else
        malformed(c, ci, e.unknown, string.format("unassigned class %d (unknown_class)", class))
        if c.len > 2 then t:add(f.unparsed, tvb(2)) end
        return string.format("unknown class %d", class)
    end
    t:append_text(", " .. vs_name(vs_class, class))
    if c.declared_end ~= nil and c.declared_end < c.len then
        -- Bytes after the declared length are Ethernet padding (section 1), never data.
        t:add(f.padding, tvb(c.declared_end, c.len - c.declared_end))
    end
    return info
end

function prismd.dissector(tvb, pinfo, tree)
    pinfo.cols.protocol = "prismd"
    local c = { tvb = tvb, len = tvb:captured_len(), wire = tvb:reported_len(), malformed = false, cut = false, class = nil }
    local ok, info = pcall(dissect, c, pinfo, tree)
    if not ok then
        local where = c.item or tree
        where:add_proto_expert_info(e.internal, "prismd dissector internal error: " .. tostring(info))
        info = "dissector error"
    end
    pinfo.cols.info = info or ""
    if c.malformed or not ok then
        pinfo.cols.info:append(" [MALFORMED]")
    elseif c.cut then
        pinfo.cols.info:append(" [cut by snapshot length]")
    end
    return tvb:len()
end

DissectorTable.get("ethertype"):add(ETHERTYPE, prismd)
