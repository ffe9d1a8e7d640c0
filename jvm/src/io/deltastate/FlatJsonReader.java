package io.deltastate;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

import org.apache.spark.unsafe.types.UTF8String;

/**
 * A cursor over one record's bytes that reads strict JSON (RFC 8259) in a single pass: no comments,
 * single quotes, NaN, leading zeros, trailing commas or bare control characters, and only
 * well-formed UTF-8 in strings (the byte sequences of the Unicode standard's table 3-7). Every read
 * throws {@link NotPlain} at the first byte that is not what JSON allows there, and also at what it
 * leaves to the variant parser: a backslash-u escape (which may be a lone surrogate) and nesting
 * deeper than {@link #MAX_DEPTH}.
 *
 * It reads the shapes an event's fields take, each read starting at optional whitespace: the
 * object's braces, a member's name and colon, a value as a long, a double, a string or a boolean
 * (or JSON null, read as Java null), and any value skipped. The caller (JsonFields) walks the object
 * with them; a record it reads to the end is well-formed JSON by construction.
 */
final class FlatJsonReader {
    /** Thrown at the first byte the reader does not vouch for; preallocated, it has no stack trace. */
    static final class NotPlain extends RuntimeException {
        private static final long serialVersionUID = 1L;
        static final NotPlain INSTANCE = new NotPlain();

        private NotPlain() {
            super(null, null, false, false);
        }
    }

    /** Jackson's default nesting limit: deeper values are left to the variant parser. */
    static final int MAX_DEPTH = 1000;
    /** Integers of at most this many digits are read without overflow checks. */
    private static final int SAFE_LONG_DIGITS = 18;
    /** Decimals of at most this many digits, without exponent, are exact as digits / 10^k in a double. */
    private static final int EXACT_DOUBLE_DIGITS = 15;
    private static final double[] POWERS_OF_TEN = new double[EXACT_DOUBLE_DIGITS + 1];

    static {
        POWERS_OF_TEN[0] = 1;
        for (int i = 1; i < POWERS_OF_TEN.length; i++) {
            POWERS_OF_TEN[i] = POWERS_OF_TEN[i - 1] * 10;
        }
    }

    private final byte[] in;
    private int pos;
    /** Set by the last string scanned: whether it held an escape. */
    private boolean escaped;
    /** Set by the last number scanned: its start, whether it had a fraction or exponent, its digit count. */
    private int numberStart;
    private boolean integral;
    private boolean hasExponent;
    private int digits;

    FlatJsonReader(byte[] in) {
        this.in = in;
    }

    private static NotPlain notPlain() {
        return NotPlain.INSTANCE;
    }

    private void skipSpace() {
        while (pos < in.length) {
            byte b = in[pos];
            if (b != ' ' && b != '\n' && b != '\r' && b != '\t') {
                return;
            }
            pos++;
        }
    }

    /** Consumes c after optional whitespace, or throws. */
    void expect(char c) {
        if (!consume(c)) {
            throw notPlain();
        }
    }

    /** Consumes c after optional whitespace; whether it was there. */
    boolean consume(char c) {
        skipSpace();
        if (pos < in.length && in[pos] == c) {
            pos++;
            return true;
        }
        return false;
    }

    /** After a member: true at a comma (another member follows), false at the object's end. */
    boolean nextMember() {
        skipSpace();
        if (pos < in.length) {
            byte b = in[pos++];
            if (b == ',') {
                return true;
            }
            if (b == '}') {
                return false;
            }
        }
        throw notPlain();
    }

    /** Only whitespace remains. */
    void end() {
        skipSpace();
        if (pos != in.length) {
            throw notPlain();
        }
    }

    /** A member's name and its colon: the index of the name in names (UTF-8), or -1 for another. */
    int name(byte[][] names) {
        expect('"');
        int start = pos;
        int end = scanString();
        byte[] text = in;
        if (escaped) {
            text = unescape(start, end);
            start = 0;
            end = text.length;
        }
        int found = -1;
        for (int i = 0; i < names.length; i++) {
            if (Arrays.equals(text, start, end, names[i], 0, names[i].length)) {
                found = i;
                break;
            }
        }
        expect(':');
        return found;
    }

    /** A string value, or null for JSON null. */
    UTF8String readString() {
        skipSpace();
        if (literal("null")) {
            return null;
        }
        expect('"');
        int start = pos;
        int end = scanString();
        return UTF8String.fromBytes(escaped ? unescape(start, end) : Arrays.copyOfRange(in, start, end));
    }

    /** A boolean value, or null for JSON null. */
    Boolean readBoolean() {
        skipSpace();
        if (literal("true")) {
            return Boolean.TRUE;
        }
        if (literal("false")) {
            return Boolean.FALSE;
        }
        if (literal("null")) {
            return null;
        }
        throw notPlain();
    }

    /** An integer value within a long, or null for JSON null; a fraction or exponent is not one. */
    Long readLong() {
        skipSpace();
        if (literal("null")) {
            return null;
        }
        scanNumber();
        if (!integral) {
            throw notPlain();
        }
        return integerValue();
    }

    /** A number as a double, or null for JSON null; one beyond a double's range is refused. */
    Double readDouble() {
        skipSpace();
        if (literal("null")) {
            return null;
        }
        scanNumber();
        double value;
        if (integral && digits <= SAFE_LONG_DIGITS) {
            value = (double) integerValue();  // as Jackson converts an integer token: rounded to nearest
        } else if (!hasExponent && digits <= EXACT_DOUBLE_DIGITS) {
            value = exactDecimal();
        } else {
            value = Double.parseDouble(new String(in, numberStart, pos - numberStart, StandardCharsets.US_ASCII));
        }
        if (Double.isInfinite(value)) {
            throw notPlain();
        }
        return value;
    }

    /** Skips one value of any kind, validating it. */
    void skipValue() {
        skipValue(0);
    }

    private void skipValue(int depth) {
        skipSpace();
        if (pos == in.length) {
            throw notPlain();
        }
        byte b = in[pos];
        if (b == '"') {
            pos++;
            scanString();
        } else if (b == '{' || b == '[') {
            if (depth >= MAX_DEPTH) {
                throw notPlain();
            }
            pos++;
            skipContainer(b == '{', depth + 1);
        } else if (b == '-' || (b >= '0' && b <= '9')) {
            scanNumber();
        } else if (!literal("true") && !literal("false") && !literal("null")) {
            throw notPlain();
        }
    }

    /** The rest of an object or array whose opening bracket was consumed. */
    private void skipContainer(boolean object, int depth) {
        char close = object ? '}' : ']';
        if (consume(close)) {
            return;
        }
        do {
            if (object) {
                expect('"');
                scanString();
                expect(':');
            }
            skipValue(depth);
        } while (consume(','));
        expect(close);
    }

    private boolean literal(String word) {
        int n = word.length();
        if (pos + n > in.length) {
            return false;
        }
        for (int i = 0; i < n; i++) {
            if (in[pos + i] != word.charAt(i)) {
                return false;
            }
        }
        pos += n;
        return true;
    }

    /**
     * Scans a string's body from pos (after its opening quote) past its closing quote; returns the
     * closing quote's index and sets escaped. Control characters, escapes other than the two-byte
     * ones and bytes outside well-formed UTF-8 throw.
     */
    private int scanString() {
        escaped = false;
        while (pos < in.length) {
            int b = in[pos] & 0xFF;
            if (b == '"') {
                return pos++;
            }
            if (b < 0x20) {
                throw notPlain();
            }
            if (b == '\\') {
                if (pos + 1 >= in.length || escapedByte(in[pos + 1]) < 0) {
                    throw notPlain();
                }
                escaped = true;
                pos += 2;
            } else if (b < 0x80) {
                pos++;
            } else {
                pos += utf8Sequence(b);
            }
        }
        throw notPlain();
    }

    /** The length of the well-formed UTF-8 sequence at pos, whose first byte is b (>= 0x80). */
    private int utf8Sequence(int b) {
        int length = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
        if (length == 0 || pos + length > in.length) {
            throw notPlain();
        }
        // The second byte's range depends on the first; the others are 80..BF.
        int second = in[pos + 1] & 0xFF;
        int lo = b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80;
        int hi = b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF;
        if (second < lo || second > hi) {
            throw notPlain();
        }
        for (int k = 2; k < length; k++) {
            int next = in[pos + k] & 0xFF;
            if (next < 0x80 || next > 0xBF) {
                throw notPlain();
            }
        }
        return length;
    }

    /** The byte a two-byte escape stands for, or -1: backslash-u is not read here. */
    private static int escapedByte(byte b) {
        switch (b) {
            case '"': return '"';
            case '\\': return '\\';
            case '/': return '/';
            case 'b': return '\b';
            case 'f': return '\f';
            case 'n': return '\n';
            case 'r': return '\r';
            case 't': return '\t';
            default: return -1;
        }
    }

    /** The bytes of a scanned string body with its escapes replaced. */
    private byte[] unescape(int start, int end) {
        byte[] out = new byte[end - start];
        int n = 0;
        for (int i = start; i < end; i++) {
            byte b = in[i];
            out[n++] = b == '\\' ? (byte) escapedByte(in[++i]) : b;
        }
        return Arrays.copyOf(out, n);
    }

    /** Scans a number at pos by JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
    private void scanNumber() {
        numberStart = pos;
        integral = true;
        hasExponent = false;
        if (pos < in.length && in[pos] == '-') {
            pos++;
        }
        int intStart = pos;
        int intDigits = scanDigits();
        if (intDigits == 0 || (intDigits > 1 && in[intStart] == '0')) {
            throw notPlain();
        }
        digits = intDigits;
        if (pos < in.length && in[pos] == '.') {
            pos++;
            int fraction = scanDigits();
            if (fraction == 0) {
                throw notPlain();
            }
            digits += fraction;
            integral = false;
        }
        if (pos < in.length && (in[pos] == 'e' || in[pos] == 'E')) {
            pos++;
            if (pos < in.length && (in[pos] == '+' || in[pos] == '-')) {
                pos++;
            }
            if (scanDigits() == 0) {
                throw notPlain();
            }
            integral = false;
            hasExponent = true;
        }
    }

    private int scanDigits() {
        int start = pos;
        while (pos < in.length && in[pos] >= '0' && in[pos] <= '9') {
            pos++;
        }
        return pos - start;
    }

    /** The last scanned integer as a long; throws beyond a long's range. */
    private long integerValue() {
        boolean negative = in[numberStart] == '-';
        if (digits > SAFE_LONG_DIGITS) {
            try {
                return Long.parseLong(new String(in, numberStart, pos - numberStart, StandardCharsets.US_ASCII));
            } catch (NumberFormatException e) {
                throw notPlain();
            }
        }
        long value = 0;
        for (int i = negative ? numberStart + 1 : numberStart; i < pos; i++) {
            value = value * 10 + (in[i] - '0');
        }
        return negative ? -value : value;
    }

    /**
     * The last scanned decimal (no exponent, at most 15 digits) as the double nearest to it: its
     * digits and 10^k are both exact doubles, and one IEEE division rounds their quotient correctly.
     */
    private double exactDecimal() {
        long mantissa = 0;
        int fractionDigits = 0;
        boolean inFraction = false;
        int i = in[numberStart] == '-' ? numberStart + 1 : numberStart;
        for (; i < pos; i++) {
            byte b = in[i];
            if (b == '.') {
                inFraction = true;
                continue;
            }
            mantissa = mantissa * 10 + (b - '0');
            if (inFraction) {
                fractionDigits++;
            }
        }
        double value = mantissa / POWERS_OF_TEN[fractionDigits];
        return in[numberStart] == '-' ? -value : value;
    }
}
