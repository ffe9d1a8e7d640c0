package io.deltastate;

import java.io.IOException;
import java.io.Serializable;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.Objects;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.objects.Invoke;
import org.apache.spark.sql.types.AbstractDataType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.ObjectType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The declared fields of a flat JSON object, read straight from a record's bytes: a struct with one
 * column per field (long, double, string or boolean), or null whenever the record is anything but
 * plainly well-formed.
 *
 * It vouches, it does not judge: null sends the record to the full validation (ingest/decode.py's
 * variant path), which names what is wrong. So every doubt gives null: text that does not start with
 * an object, a parse error, text after the object, a declared field given twice or of another JSON
 * kind (an integer field holding 1.5, a string field holding 12), an integer beyond a long, a number
 * beyond a double, a NUL byte (which would let Jackson read the bytes as UTF-16), a backslash
 * followed by u (an escape, which the variant parser judges: it refuses a lone surrogate), bytes
 * that are not well-formed UTF-8 (Jackson does not check the strings of fields it skips). One scan
 * of the bytes finds the last three before the parse, so the variant path's own checks of them run
 * only on the records that take it. A field that is absent or JSON null is a null column; fields
 * not declared are parsed and skipped.
 *
 * Jackson's byte parser reads the UTF-8 directly, strictly (no comments, single quotes, NaN, leading
 * zeros or trailing commas). Spark's from_json reads a record through a new InputStreamReader, whose
 * 8 KB buffer and char decoding cost more than the parse of a small event. The expression is
 * Spark's Invoke of parse on this object, so generated code calls it directly.
 */
public final class JsonFields implements Serializable {
    private static final long serialVersionUID = 1L;
    private static final JsonFactory JSON = new JsonFactory();

    /** What a field's column holds. */
    private enum Kind { LONG, DOUBLE, STRING, BOOLEAN }

    private final String[] names;
    private final String[] types;
    private final Kind[] kinds;
    private final Map<String, Integer> index = new HashMap<>();
    private final StructType schema;

    /** names and types: one per field; types "long", "double", "string" or "boolean". */
    public JsonFields(String[] names, String[] types) {
        if (names.length != types.length) {
            throw new IllegalArgumentException(names.length + " field names but " + types.length + " types");
        }
        this.names = names.clone();
        this.types = types.clone();
        this.kinds = new Kind[names.length];
        StructField[] fields = new StructField[names.length];
        for (int i = 0; i < names.length; i++) {
            kinds[i] = kind(types[i]);
            fields[i] = DataTypes.createStructField(names[i], sparkType(kinds[i]), true);
            index.put(names[i], i);
        }
        this.schema = DataTypes.createStructType(fields);
    }

    private static Kind kind(String type) {
        switch (type) {
            case "long": return Kind.LONG;
            case "double": return Kind.DOUBLE;
            case "string": return Kind.STRING;
            case "boolean": return Kind.BOOLEAN;
            default: throw new IllegalArgumentException("unsupported field type " + type);
        }
    }

    private static DataType sparkType(Kind kind) {
        switch (kind) {
            case LONG: return DataTypes.LongType;
            case DOUBLE: return DataTypes.DoubleType;
            case STRING: return DataTypes.StringType;
            default: return DataTypes.BooleanType;
        }
    }

    /** The record's fields, or null when it is not plainly a well-formed object of them. */
    public InternalRow parse(byte[] bytes) {
        int start = 0;
        while (start < bytes.length && isSpace(bytes[start])) {
            start++;
        }
        if (start == bytes.length || bytes[start] != '{' || !plain(bytes)) {
            return null;
        }
        Object[] values = new Object[names.length];
        boolean[] seen = new boolean[names.length];
        try (JsonParser parser = JSON.createParser(bytes, start, bytes.length - start)) {
            parser.nextToken();  // the object's start
            for (JsonToken token = parser.nextToken(); token != JsonToken.END_OBJECT; token = parser.nextToken()) {
                Integer field = index.get(parser.currentName());
                JsonToken value = parser.nextToken();
                if (field == null) {
                    parser.skipChildren();
                    continue;
                }
                if (seen[field]) {
                    return null;
                }
                seen[field] = true;
                if (value != JsonToken.VALUE_NULL) {
                    Object read = read(parser, value, kinds[field]);
                    if (read == null) {
                        return null;
                    }
                    values[field] = read;
                }
            }
            if (parser.nextToken() != null) {
                return null;
            }
        } catch (IOException | RuntimeException e) {
            return null;
        }
        return new GenericInternalRow(values);
    }

    /** A value of the field's kind, or null when the token is of another JSON kind or out of range. */
    private static Object read(JsonParser parser, JsonToken token, Kind kind) throws IOException {
        switch (kind) {
            case LONG:
                if (token != JsonToken.VALUE_NUMBER_INT) {
                    return null;
                }
                JsonParser.NumberType type = parser.getNumberType();
                return type == JsonParser.NumberType.INT || type == JsonParser.NumberType.LONG
                        ? parser.getLongValue() : null;
            case DOUBLE:
                if (token != JsonToken.VALUE_NUMBER_INT && token != JsonToken.VALUE_NUMBER_FLOAT) {
                    return null;
                }
                double number = parser.getDoubleValue();
                return Double.isInfinite(number) ? null : number;
            case STRING:
                return token == JsonToken.VALUE_STRING ? UTF8String.fromString(parser.getText()) : null;
            default:
                return token == JsonToken.VALUE_TRUE ? Boolean.TRUE : token == JsonToken.VALUE_FALSE ? Boolean.FALSE : null;
        }
    }

    private static boolean isSpace(byte b) {
        return b == ' ' || b == '\t' || b == '\n' || b == '\r';
    }

    /**
     * Whether bytes hold no NUL, no backslash followed by u, and only well-formed UTF-8 (the byte
     * sequences of the Unicode standard's table 3-7: no overlong form, no surrogate, nothing past
     * U+10FFFF, no sequence cut short).
     */
    static boolean plain(byte[] bytes) {
        int i = 0;
        while (i < bytes.length) {
            int b = bytes[i] & 0xFF;
            if (b < 0x80) {
                if (b == 0 || (b == '\\' && i + 1 < bytes.length && bytes[i + 1] == 'u')) {
                    return false;
                }
                i++;
                continue;
            }
            int length = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
            if (length == 0 || i + length > bytes.length) {
                return false;
            }
            // The second byte's range depends on the first; the others are 80..BF.
            int second = bytes[i + 1] & 0xFF;
            int lo = b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80;
            int hi = b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF;
            if (second < lo || second > hi) {
                return false;
            }
            for (int k = 2; k < length; k++) {
                int next = bytes[i + k] & 0xFF;
                if (next < 0x80 || next > 0xBF) {
                    return false;
                }
            }
            i += length;
        }
        return true;
    }

    /** The struct of the declared fields read from value (binary): parse called on each record. */
    public Expression of(Expression value) {
        Seq<Expression> args = CollectionConverters.asScala(java.util.List.of(value)).toList();
        Seq<AbstractDataType> inputTypes = CollectionConverters.asScala(
                java.util.List.<AbstractDataType>of(DataTypes.BinaryType)).toList();
        return new Invoke(new Literal(this, new ObjectType(JsonFields.class)), "parse", schema, args, inputTypes,
                true, true, true);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof JsonFields other && Arrays.equals(names, other.names) && Arrays.equals(types, other.types);
    }

    @Override
    public int hashCode() {
        return Objects.hash(Arrays.hashCode(names), Arrays.hashCode(types));
    }

    @Override
    public String toString() {
        return "JsonFields(" + String.join(",", names) + ")";
    }
}
