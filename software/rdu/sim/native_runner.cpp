// The native runner of rdu.sim.native: a Verilated RDUSystem with its HBM/DDR/host-link
// memory models and AXI4 subordinate ports in C++, driven from Python through ctypes
// (a shared library). Python calls it per host action (set a signal, read a signal, run
// N cycles), never per cycle.
//
// The memory side is a line-by-line port of the Python models, so that a run takes the
// same cycles in both: sim_models/memory.py (MemoryModel: channels, banks, open rows,
// float channel clocks) and rdu/sim/memory_system.py (_Port: in-order responses, the
// error checks and their reasons) as stepped by rdu/sim/agents.py (drive; settle and
// sample; edge: every source, then every sink, in attach order). Supported: the
// default protocol of the Python ports (stall "none", write order "aw_first", no
// injected faults); rdu.sim.native refuses the rest.
//
// Built per Verilator build by rdu.sim.native.build_native, with "ports.inc" generated
// from the top module's port list: PORT("name", C++ member, width, is_input) per port.
// A build with waves (Verilator --trace-fst or --trace) is linked with RDU_TRACE_FST or
// RDU_TRACE_VCD: rdu_trace_open then writes every half cycle (one clock = 10 time units).

#include "Vtop.h"
#include "verilated.h"
#if defined(RDU_TRACE_FST)
#include "verilated_fst_c.h"
#define RDU_TRACE 1
using TraceFile = VerilatedFstC;
#elif defined(RDU_TRACE_VCD)
#include "verilated_vcd_c.h"
#define RDU_TRACE 1
using TraceFile = VerilatedVcdC;
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

// -- ports of the top module -------------------------------------------------------------

struct PortInfo {
    const char* name;
    int width;
    int is_input;
    void* data;
};

int words_of(int width) { return (width + 31) / 32; }

uint64_t port_read64(const PortInfo& port) {
    if (port.width <= 8) return *static_cast<uint8_t*>(port.data);
    if (port.width <= 16) return *static_cast<uint16_t*>(port.data);
    if (port.width <= 32) return *static_cast<uint32_t*>(port.data);
    if (port.width <= 64) return *static_cast<uint64_t*>(port.data);
    const uint32_t* words = static_cast<const uint32_t*>(port.data);
    return words[0] | (uint64_t(words[1]) << 32);
}

void port_write64(const PortInfo& port, uint64_t value) {
    if (port.width <= 8) *static_cast<uint8_t*>(port.data) = uint8_t(value);
    else if (port.width <= 16) *static_cast<uint16_t*>(port.data) = uint16_t(value);
    else if (port.width <= 32) *static_cast<uint32_t*>(port.data) = uint32_t(value);
    else if (port.width <= 64) *static_cast<uint64_t*>(port.data) = value;
    else {
        uint32_t* words = static_cast<uint32_t*>(port.data);
        std::memset(words, 0, 4 * words_of(port.width));
        words[0] = uint32_t(value);
        words[1] = uint32_t(value >> 32);
    }
}

void port_read_words(const PortInfo& port, uint32_t* out) {
    if (port.width <= 64) {
        uint64_t value = port_read64(port);
        out[0] = uint32_t(value);
        if (port.width > 32) out[1] = uint32_t(value >> 32);
    } else {
        std::memcpy(out, port.data, 4 * words_of(port.width));
    }
}

void port_write_words(const PortInfo& port, const uint32_t* in) {
    if (port.width <= 64) {
        uint64_t value = in[0];
        if (port.width > 32) value |= uint64_t(in[1]) << 32;
        port_write64(port, value);
    } else {
        std::memcpy(port.data, in, 4 * words_of(port.width));
    }
}

// bit fields of a little-endian word array (payloads, lib.data layouts)
uint64_t get_bits(const uint32_t* words, int offset, int width) {
    uint64_t value = 0;
    for (int done = 0; done < width;) {
        int bit = offset + done;
        int take = std::min(32 - bit % 32, width - done);
        uint64_t chunk = (words[bit / 32] >> (bit % 32)) & ((take == 32) ? 0xffffffffull
                                                                        : ((1ull << take) - 1));
        value |= chunk << done;
        done += take;
    }
    return value;
}

void put_bits(uint32_t* words, int offset, int width, uint64_t value) {
    for (int done = 0; done < width;) {
        int bit = offset + done;
        int take = std::min(32 - bit % 32, width - done);
        uint32_t mask = (take == 32) ? 0xffffffffu : ((1u << take) - 1);
        words[bit / 32] = (words[bit / 32] & ~(mask << (bit % 32))) |
                          ((uint32_t(value >> done) & mask) << (bit % 32));
        done += take;
    }
}

// -- memory models (sim_models/memory.py) ------------------------------------------------

constexpr uint64_t PAGE_BYTES = 1 << 20;

struct Region {
    std::string name;
    uint64_t base, size;
    int channels, banks;
    uint64_t row_bytes, interleave;
    int hit_latency, miss_latency, write_latency;
    double beat_cycles;
    std::vector<double> channel_free;
    std::unordered_map<uint64_t, int64_t> open_rows;     // channel * banks + bank -> row
    std::unordered_map<uint64_t, std::unique_ptr<uint8_t[]>> pages;
    uint64_t read_beats = 0, write_beats = 0, row_hits = 0, row_misses = 0;
    int beat_bytes;

    bool contains(uint64_t address) const { return address >= base && address < base + size; }
    uint64_t end() const { return base + size; }

    struct Piece { int channel, bank; int64_t row; int first, count; };

    std::vector<Piece> pieces(uint64_t address, int beats) const {
        std::vector<Piece> out;
        int index = 0;
        while (index < beats) {
            uint64_t offset = address - base + uint64_t(index) * beat_bytes;
            uint64_t block = offset / interleave;
            int64_t left = int64_t((interleave - offset % interleave + beat_bytes - 1) /
                                   beat_bytes);
            int count = int(std::min<int64_t>(beats - index, std::max<int64_t>(1, left)));
            int channel = int(block % channels);
            int bank = int((block / channels) % banks);
            int64_t row = int64_t(offset / (row_bytes * channels * banks));
            out.push_back({channel, bank, row, index, count});
            index += count;
        }
        return out;
    }

    bool open(int channel, int bank, int64_t row) {
        uint64_t key = uint64_t(channel) * banks + bank;
        auto found = open_rows.find(key);
        if (found != open_rows.end() && found->second == row) {
            row_hits++;
            return true;
        }
        open_rows[key] = row;
        row_misses++;
        return false;
    }

    std::vector<double> schedule_read(uint64_t address, int beats, int64_t cycle) {
        std::vector<double> ready(beats, 0.0);
        for (const Piece& piece : pieces(address, beats)) {
            int latency = open(piece.channel, piece.bank, piece.row) ? hit_latency
                                                                      : miss_latency;
            double start = std::max(double(cycle + latency), channel_free[piece.channel]);
            for (int k = 0; k < piece.count; k++) ready[piece.first + k] = start + k * beat_cycles;
            channel_free[piece.channel] = start + piece.count * beat_cycles;
        }
        read_beats += beats;
        return ready;
    }

    double schedule_write(uint64_t address, int beats, int64_t cycle) {
        double done = double(cycle);
        bool missed = false;
        for (const Piece& piece : pieces(address, beats)) {
            missed |= !open(piece.channel, piece.bank, piece.row);
            double start = std::max(double(cycle), channel_free[piece.channel]);
            channel_free[piece.channel] = start + piece.count * beat_cycles;
            done = std::max(done, channel_free[piece.channel]);
        }
        write_beats += beats;
        int extra = missed ? miss_latency - hit_latency : 0;
        return done + write_latency + extra;
    }

    void read_bytes(uint64_t address, uint8_t* out, uint64_t count) const {
        uint64_t offset = address - base;
        while (count) {
            uint64_t page = offset / PAGE_BYTES, start = offset % PAGE_BYTES;
            uint64_t length = std::min(count, PAGE_BYTES - start);
            auto found = pages.find(page);
            if (found == pages.end()) std::memset(out, 0, length);
            else std::memcpy(out, found->second.get() + start, length);
            out += length; offset += length; count -= length;
        }
    }

    void write_bytes(uint64_t address, const uint8_t* in, uint64_t count,
                     const uint8_t* mask = nullptr) {
        uint64_t offset = address - base;
        while (count) {
            uint64_t page = offset / PAGE_BYTES, start = offset % PAGE_BYTES;
            uint64_t length = std::min(count, PAGE_BYTES - start);
            auto& store = pages[page];
            if (!store) {
                store.reset(new uint8_t[PAGE_BYTES]);
                std::memset(store.get(), 0, PAGE_BYTES);
            }
            if (mask) {
                for (uint64_t i = 0; i < length; i++)
                    if (mask[i]) store[start + i] = in[i];
                mask += length;
            } else {
                std::memcpy(store.get() + start, in, length);
            }
            in += length; offset += length; count -= length;
        }
    }
};

// -- AXI4 subordinate ports (rdu/sim/memory_system.py) ------------------------------------

enum Resp { OKAY = 0, SLVERR = 2, DECERR = 3 };
constexpr int ERROR_LATENCY = 2;
constexpr int INCR = 1;

// reasons of an errored burst; rdu.sim.native formats them as memory_system does
enum Reason { NOT_MAPPED = 1, NOT_INCR, BAD_SIZE, UNALIGNED, PAST_END, CROSSES_4K, BAD_WLAST };

struct ErrorRecord {
    int64_t cycle;
    int port, kind;        // kind 0 read, 1 write
    int64_t address, beats;
    int resp, reason;
    int64_t detail;        // the burst type, size, region index or beat the reason names
};

// field offsets and widths of the five channel payloads (from rdu.sim.axi.AXICodec)
enum Field { AR_ADDR, AR_LEN, AR_SIZE, AR_BURST, AR_ID,
             AW_ADDR, AW_LEN, AW_SIZE, AW_BURST, AW_ID,
             W_DATA, W_STRB, W_LAST, R_ID, R_DATA, R_RESP, R_LAST, B_ID, B_RESP, FIELDS };

struct Beat { int id; int resp; bool last; std::vector<uint32_t> data; };

struct ReadBurst {
    int id, beats, resp, sent = 0;
    std::vector<double> ready;
    std::vector<uint8_t> data;
};

struct WriteBurst {
    uint64_t address;
    int id, beats, received = 0, resp;
    int region;            // -1: errored
    std::vector<uint8_t> data, mask;
    bool full = true;
};

struct Channel {            // one stream of a port: valid, ready, payload on the top
    int valid = -1, ready = -1, payload = -1;
};

struct AXIPort {
    std::string path;
    int index = 0;
    int max_reads = 32, max_writes = 32;
    Channel ar, aw, w, r, b;
    int offsets[FIELDS], widths[FIELDS];
    int beat_bytes = 32, size_code = 5;
    std::deque<ReadBurst> reads;
    std::deque<WriteBurst> writes;
    std::deque<std::pair<double, std::pair<int, int>>> b_pending;   // due, (id, resp)
    std::deque<Beat> r_queue;
    std::deque<std::pair<int, int>> b_queue;                       // (id, resp)
    bool r_presenting = false, b_presenting = false;
    // sampled before the edge
    bool s_ar_valid, s_ar_ready, s_aw_valid, s_aw_ready, s_w_valid, s_w_ready;
    bool s_r_valid, s_r_ready, s_b_valid, s_b_ready;
    std::vector<uint32_t> s_ar, s_aw, s_w;
};

}  // namespace

struct System {
    std::unique_ptr<VerilatedContext> context;
    std::unique_ptr<Vtop> top;
    std::vector<PortInfo> ports;
    std::vector<Region> regions;
    std::vector<AXIPort> axi;
    std::vector<ErrorRecord> errors;
    int64_t cycle = 0;           // edges since the agents started (Bench.cycle)
    bool started = false;        // the first edge after reset is not the agents' (skip_edge)
    bool dirty = true;           // inputs changed since the last eval
    int64_t watchdog = 2000, last_progress = 0, hard_limit = INT64_MAX;
    int clk = -1;
#ifdef RDU_TRACE
    std::unique_ptr<TraceFile> trace;
#endif
    uint64_t trace_time = 0;     // 5 time units per half cycle

    // the waves (if open) after an evaluation that ends a half cycle
    void dump() {
#ifdef RDU_TRACE
        if (trace) trace->dump(trace_time);
#endif
        trace_time += 5;
    }

    int port_index(const std::string& name) const {
        for (size_t i = 0; i < ports.size(); i++)
            if (name == ports[i].name) return int(i);
        return -1;
    }

    int region_at(uint64_t address) const {
        for (size_t i = 0; i < regions.size(); i++)
            if (regions[i].contains(address)) return int(i);
        return -1;
    }

    void settle() {
        if (dirty) { top->eval(); dirty = false; }
    }

    bool bit(int port) { return port_read64(ports[port]) & 1; }
    void drive(int port, uint64_t value) { port_write64(ports[port], value); }

    // -- the stream agents' drive(): valid/payload of r and b, ready of ar/aw/w --------
    void drive_ports() {
        for (AXIPort& p : axi) {
            p.r_presenting = !p.r_queue.empty();
            drive(p.r.valid, p.r_presenting);
            if (p.r_presenting) {
                const Beat& beat = p.r_queue.front();
                const PortInfo& info = ports[p.r.payload];
                std::vector<uint32_t> words(words_of(info.width), 0);
                put_bits(words.data(), p.offsets[R_ID], p.widths[R_ID], beat.id);
                put_bits(words.data(), p.offsets[R_RESP], p.widths[R_RESP], beat.resp);
                put_bits(words.data(), p.offsets[R_LAST], p.widths[R_LAST], beat.last);
                for (int i = 0; i < p.widths[R_DATA] / 32; i++)
                    put_bits(words.data(), p.offsets[R_DATA] + 32 * i, 32, beat.data[i]);
                port_write_words(info, words.data());
            }
            p.b_presenting = !p.b_queue.empty();
            drive(p.b.valid, p.b_presenting);
            if (p.b_presenting) {
                const PortInfo& info = ports[p.b.payload];
                std::vector<uint32_t> words(words_of(info.width), 0);
                put_bits(words.data(), p.offsets[B_ID], p.widths[B_ID], p.b_queue.front().first);
                put_bits(words.data(), p.offsets[B_RESP], p.widths[B_RESP],
                         p.b_queue.front().second);
                port_write_words(info, words.data());
            }
            drive(p.ar.ready, int(p.reads.size()) < p.max_reads);
            drive(p.aw.ready, int(p.writes.size()) < p.max_writes);
            drive(p.w.ready, incomplete(p) != nullptr);
        }
        dirty = true;
    }

    void sample_ports() {
        for (AXIPort& p : axi) {
            p.s_ar_valid = bit(p.ar.valid); p.s_ar_ready = bit(p.ar.ready);
            p.s_aw_valid = bit(p.aw.valid); p.s_aw_ready = bit(p.aw.ready);
            p.s_w_valid = bit(p.w.valid); p.s_w_ready = bit(p.w.ready);
            p.s_r_valid = bit(p.r.valid); p.s_r_ready = bit(p.r.ready);
            p.s_b_valid = bit(p.b.valid); p.s_b_ready = bit(p.b.ready);
            if (p.s_ar_valid && p.s_ar_ready) {
                p.s_ar.resize(words_of(ports[p.ar.payload].width));
                port_read_words(ports[p.ar.payload], p.s_ar.data());
            }
            if (p.s_aw_valid && p.s_aw_ready) {
                p.s_aw.resize(words_of(ports[p.aw.payload].width));
                port_read_words(ports[p.aw.payload], p.s_aw.data());
            }
            if (p.s_w_valid && p.s_w_ready) {
                p.s_w.resize(words_of(ports[p.w.payload].width));
                port_read_words(ports[p.w.payload], p.s_w.data());
            }
        }
    }

    // -- the agents' edge() ------------------------------------------------------------
    bool edge_ports() {
        bool progress = false;
        for (AXIPort& p : axi) {                 // sources, in attach order: r, then b
            if (p.s_r_valid && p.s_r_ready) {
                p.r_queue.pop_front();
                p.r_presenting = false;
                progress = true;
            }
            tick(p, cycle + 1);
            if (p.s_b_valid && p.s_b_ready) {
                p.b_queue.pop_front();
                p.b_presenting = false;
                progress = true;
            }
        }
        for (AXIPort& p : axi) {                 // sinks, in attach order: ar, aw, w
            if (p.s_ar_valid && p.s_ar_ready) { on_ar(p); progress = true; }
            if (p.s_aw_valid && p.s_aw_ready) { on_aw(p); progress = true; }
            if (p.s_w_valid && p.s_w_ready) { on_w(p); progress = true; }
        }
        return progress;
    }

    bool idle() const {
        for (const AXIPort& p : axi)
            if (!p.r_queue.empty() || !p.b_queue.empty()) return false;
        return true;
    }

    int decode(AXIPort& p, uint64_t address, int beats, int size, int burst, int kind,
               int* resp) {
        int region = region_at(address);
        int reason = 0;
        int64_t detail = 0;
        if (region < 0) {
            *resp = DECERR; reason = NOT_MAPPED;
        } else {
            *resp = SLVERR;
            uint64_t end = address + uint64_t(beats) * p.beat_bytes;
            if (burst != INCR) { reason = NOT_INCR; detail = burst; }
            else if (size != p.size_code) { reason = BAD_SIZE; detail = size; }
            else if (address % p.beat_bytes) reason = UNALIGNED;
            else if (end > regions[region].end()) { reason = PAST_END; detail = region; }
            else if (address / 4096 != (end - 1) / 4096) reason = CROSSES_4K;
            else *resp = OKAY;
        }
        if (reason) {
            errors.push_back({cycle, p.index, kind, int64_t(address), beats, *resp, reason,
                              detail});
            return -1;
        }
        return region;
    }

    void on_ar(AXIPort& p) {
        const uint32_t* words = p.s_ar.data();
        uint64_t address = get_bits(words, p.offsets[AR_ADDR], p.widths[AR_ADDR]);
        int beats = int(get_bits(words, p.offsets[AR_LEN], p.widths[AR_LEN])) + 1;
        int resp;
        int region = decode(p, address, beats,
                            int(get_bits(words, p.offsets[AR_SIZE], p.widths[AR_SIZE])),
                            int(get_bits(words, p.offsets[AR_BURST], p.widths[AR_BURST])),
                            0, &resp);
        ReadBurst burst;
        burst.id = int(get_bits(words, p.offsets[AR_ID], p.widths[AR_ID]));
        burst.beats = beats;
        burst.resp = resp;
        burst.data.assign(size_t(beats) * p.beat_bytes, 0);
        if (region < 0) {
            burst.ready.assign(beats, double(cycle + ERROR_LATENCY));
        } else {
            burst.ready = regions[region].schedule_read(address, beats, cycle);
            regions[region].read_bytes(address, burst.data.data(), burst.data.size());
        }
        p.reads.push_back(std::move(burst));
    }

    void tick(AXIPort& p, int64_t now) {
        if (!p.reads.empty() && p.r_queue.size() < 2) {
            ReadBurst& burst = p.reads.front();
            if (burst.ready[burst.sent] <= double(now)) {
                int index = burst.sent;
                bool last = index == burst.beats - 1;
                Beat beat{burst.id, burst.resp, last,
                          std::vector<uint32_t>(p.beat_bytes / 4)};
                std::memcpy(beat.data.data(), burst.data.data() + size_t(index) * p.beat_bytes,
                            p.beat_bytes);
                p.r_queue.push_back(std::move(beat));
                burst.sent++;
                if (last) p.reads.pop_front();
            }
        }
        if (!p.b_pending.empty() && p.b_pending.front().first <= double(now)) {
            p.b_queue.push_back(p.b_pending.front().second);
            p.b_pending.pop_front();
        }
    }

    WriteBurst* incomplete(AXIPort& p) {
        for (WriteBurst& burst : p.writes)
            if (burst.received < burst.beats) return &burst;
        return nullptr;
    }

    void on_aw(AXIPort& p) {
        const uint32_t* words = p.s_aw.data();
        WriteBurst burst;
        burst.address = get_bits(words, p.offsets[AW_ADDR], p.widths[AW_ADDR]);
        burst.beats = int(get_bits(words, p.offsets[AW_LEN], p.widths[AW_LEN])) + 1;
        burst.id = int(get_bits(words, p.offsets[AW_ID], p.widths[AW_ID]));
        burst.region = decode(p, burst.address, burst.beats,
                              int(get_bits(words, p.offsets[AW_SIZE], p.widths[AW_SIZE])),
                              int(get_bits(words, p.offsets[AW_BURST], p.widths[AW_BURST])),
                              1, &burst.resp);
        p.writes.push_back(std::move(burst));
    }

    void on_w(AXIPort& p) {
        WriteBurst* entry = incomplete(p);
        if (!entry) return;                    // w is ready only with an incomplete burst
        const uint32_t* words = p.s_w.data();
        int index = entry->received;
        bool last = index == entry->beats - 1;
        bool wlast = get_bits(words, p.offsets[W_LAST], p.widths[W_LAST]);
        if (wlast != last) {
            errors.push_back({cycle, p.index, 1, int64_t(entry->address), entry->beats,
                              SLVERR, BAD_WLAST, index});
            entry->resp = SLVERR;
        }
        size_t at = entry->data.size();
        entry->data.resize(at + p.beat_bytes);
        entry->mask.resize(at + p.beat_bytes);
        for (int i = 0; i < p.beat_bytes / 4; i++) {
            uint32_t word = uint32_t(get_bits(words, p.offsets[W_DATA] + 32 * i, 32));
            std::memcpy(entry->data.data() + at + 4 * i, &word, 4);
        }
        for (int i = 0; i < p.beat_bytes; i++) {
            bool on = get_bits(words, p.offsets[W_STRB] + i, 1);
            entry->mask[at + i] = on;
            entry->full &= on;
        }
        entry->received = index + 1;
        if (!last) return;
        while (!p.writes.empty() && p.writes.front().received == p.writes.front().beats) {
            WriteBurst& burst = p.writes.front();
            double due;
            if (burst.region >= 0 && burst.resp == OKAY) {
                Region& region = regions[burst.region];
                region.write_bytes(burst.address, burst.data.data(), burst.data.size(),
                                   burst.full ? nullptr : burst.mask.data());
                due = region.schedule_write(burst.address, burst.beats, cycle);
            } else {
                due = double(cycle + ERROR_LATENCY);
            }
            if (!p.b_pending.empty()) due = std::max(due, p.b_pending.back().first);
            p.b_pending.push_back({due, {burst.id, burst.resp}});
            p.writes.pop_front();
        }
    }

    bool low_done = false;       // evaluated with clk low since the last change

    // the first half of a cycle: clk low, the inputs settled (what a read sees)
    void low() {
        port_write64(ports[clk], 0);
        top->eval();
        dirty = false;
        low_done = true;
    }

    // one clock cycle: settle and sample, rising edge, the agents' edge and drive
    int step() {
        if (!low_done || dirty) low();
        low_done = false;
        if (started) sample_ports();
        dump();                                // the low half as sampled
        port_write64(ports[clk], 1);
        top->eval();
        dirty = false;
        dump();
        if (!started) {                        // AgentGroup.skip_edge
            started = true;
            cycle++;
            last_progress = cycle;
            drive_ports();
            return 0;
        }
        bool progress = edge_ports();
        if (progress || idle()) last_progress = cycle;
        else if (cycle - last_progress >= watchdog) return 1;
        cycle++;
        drive_ports();
        return cycle >= hard_limit ? 2 : 0;
    }
};

extern "C" {

System* rdu_open() {
    auto* system = new System;
    system->context = std::make_unique<VerilatedContext>();
#ifdef RDU_TRACE
    system->context->traceEverOn(true);
#endif
    system->top = std::make_unique<Vtop>(system->context.get());
    Vtop* top = system->top.get();
#define PORT(NAME, MEMBER, WIDTH, INPUT) \
    system->ports.push_back({NAME, WIDTH, INPUT, static_cast<void*>(&top->MEMBER)});
#include "ports.inc"
#undef PORT
    system->clk = system->port_index("clk");
    return system;
}

void rdu_close(System* system) {
    system->top->final();
#ifdef RDU_TRACE
    if (system->trace) system->trace->close();
#endif
    delete system;
}

// start writing waves to `path` (0), or -1: the library was linked without waves
int rdu_trace_open(System* system, const char* path) {
#ifdef RDU_TRACE
    system->trace = std::make_unique<TraceFile>();
    system->top->trace(system->trace.get(), 99);
    system->trace->open(path);
    return system->trace->isOpen() ? 0 : -2;
#else
    (void)system, (void)path;
    return -1;
#endif
}

int rdu_port_count(System* system) { return int(system->ports.size()); }

const char* rdu_port_name(System* system, int index, int* width, int* is_input) {
    const PortInfo& port = system->ports[index];
    *width = port.width;
    *is_input = port.is_input;
    return port.name;
}

void rdu_set64(System* system, int port, uint64_t value) {
    port_write64(system->ports[port], value);
    system->dirty = true;
}

void rdu_set_words(System* system, int port, const uint32_t* words) {
    port_write_words(system->ports[port], words);
    system->dirty = true;
}

uint64_t rdu_get64(System* system, int port) {
    system->settle();
    return port_read64(system->ports[port]);
}

void rdu_get_words(System* system, int port, uint32_t* words) {
    system->settle();
    port_read_words(system->ports[port], words);
}

// reset for `cycles` edges, then release it (CocotbBench.start)
void rdu_start(System* system, int cycles) {
    int rst = system->port_index("rst");
    port_write64(system->ports[rst], 1);
    for (int i = 0; i < cycles; i++) {
        port_write64(system->ports[system->clk], 0);
        system->top->eval();
        system->dump();
        port_write64(system->ports[system->clk], 1);
        system->top->eval();
        system->dump();
    }
    port_write64(system->ports[rst], 0);
    system->dirty = true;
}

void rdu_limits(System* system, int64_t watchdog, int64_t hard_limit) {
    system->watchdog = watchdog;
    system->hard_limit = hard_limit;
}

// run `count` cycles; 0: done, 1: the stream watchdog fired, 2: the hard cycle limit
int rdu_cycles(System* system, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        int status = system->step();
        if (status) return status;
    }
    return 0;
}

// run at least one and at most `limit` cycles, stopping at the first cycle in which
// one of `watched` (ports of up to 64 bits) reads other than before the first; the
// cycles run, or -1/-2 as rdu_cycles' 1/2
int64_t rdu_advance_until_change(System* system, const int* watched, int count,
                                 int64_t limit) {
    system->low();
    std::vector<uint64_t> start(count);
    for (int i = 0; i < count; i++) start[i] = port_read64(system->ports[watched[i]]);
    for (int64_t n = 1; n <= limit; n++) {
        int status = system->step();
        if (status) return -status;
        if (n == limit) return n;
        system->low();
        for (int i = 0; i < count; i++)
            if (port_read64(system->ports[watched[i]]) != start[i]) return n;
    }
    return limit;
}

int64_t rdu_cycle(System* system) { return system->cycle; }

int rdu_region(System* system, const char* name, uint64_t base, uint64_t size, int channels,
               int banks, uint64_t row_bytes, int hit_latency, int miss_latency,
               double bytes_per_cycle, uint64_t interleave, int write_latency,
               int beat_bytes) {
    Region region;
    region.name = name;
    region.base = base; region.size = size;
    region.channels = channels; region.banks = banks;
    region.row_bytes = row_bytes; region.interleave = interleave;
    region.hit_latency = hit_latency; region.miss_latency = miss_latency;
    region.write_latency = write_latency;
    region.beat_bytes = beat_bytes;
    region.beat_cycles = beat_bytes / bytes_per_cycle;
    region.channel_free.assign(channels, 0.0);
    system->regions.push_back(std::move(region));
    return int(system->regions.size()) - 1;
}

// a port's channels by their top-level names (prefix "axi__0": axi__0__ar__valid...);
// `layout` holds offset, width of every Field; -1 if a signal is missing
int rdu_attach(System* system, const char* prefix, int max_reads, int max_writes,
               int beat_bytes, const int* layout) {
    AXIPort port;
    port.path = prefix;
    port.index = int(system->axi.size());
    port.max_reads = max_reads;
    port.max_writes = max_writes;
    port.beat_bytes = beat_bytes;
    port.size_code = 0;
    while ((1 << port.size_code) < beat_bytes) port.size_code++;
    for (int i = 0; i < FIELDS; i++) {
        port.offsets[i] = layout[2 * i];
        port.widths[i] = layout[2 * i + 1];
    }
    std::string base = prefix;
    Channel* channels[] = {&port.ar, &port.aw, &port.w, &port.r, &port.b};
    const char* names[] = {"ar", "aw", "w", "r", "b"};
    for (int i = 0; i < 5; i++) {
        std::string stem = base + "__" + names[i] + "__";
        channels[i]->valid = system->port_index(stem + "valid");
        channels[i]->ready = system->port_index(stem + "ready");
        channels[i]->payload = system->port_index(stem + "payload");
        if (channels[i]->valid < 0 || channels[i]->ready < 0 || channels[i]->payload < 0)
            return -1;
    }
    system->axi.push_back(std::move(port));
    return int(system->axi.size()) - 1;
}

void rdu_reset_ports(System* system) {
    for (AXIPort& p : system->axi) {
        p.reads.clear();
        p.writes.clear();
        p.b_pending.clear();
        // an item being presented stays until taken (valid is never withdrawn)
        while (p.r_queue.size() > (p.r_presenting ? 1u : 0u)) p.r_queue.pop_back();
        while (p.b_queue.size() > (p.b_presenting ? 1u : 0u)) p.b_queue.pop_back();
    }
}

void rdu_mem_write(System* system, int region, uint64_t address, const uint8_t* data,
                   uint64_t count) {
    system->regions[region].write_bytes(address, data, count);
}

void rdu_mem_read(System* system, int region, uint64_t address, uint8_t* data,
                  uint64_t count) {
    system->regions[region].read_bytes(address, data, count);
}

void rdu_mem_clear(System* system) {
    for (Region& region : system->regions) region.pages.clear();
    system->errors.clear();
}

void rdu_region_stats(System* system, int region, uint64_t* out) {
    const Region& r = system->regions[region];
    out[0] = r.read_beats; out[1] = r.write_beats; out[2] = r.row_hits; out[3] = r.row_misses;
}

int rdu_error_count(System* system) { return int(system->errors.size()); }

void rdu_error(System* system, int index, int64_t* out) {
    const ErrorRecord& e = system->errors[index];
    out[0] = e.cycle; out[1] = e.port; out[2] = e.kind; out[3] = e.address;
    out[4] = e.beats; out[5] = e.resp; out[6] = e.reason; out[7] = e.detail;
}

// what the stream watchdog names: per port, r and b items waiting and whether presented
void rdu_port_queues(System* system, int port, int64_t* out) {
    const AXIPort& p = system->axi[port];
    out[0] = int64_t(p.r_queue.size()); out[1] = int64_t(p.b_queue.size());
    out[2] = int64_t(p.reads.size()); out[3] = int64_t(p.writes.size());
}

}  // extern "C"
