package io.deltastate;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Objects;

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

import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The declared fields of a flat JSON object, read straight from a record's bytes: a struct with one
 * column per field (long, double, string or boolean), or null whenever the record is anything but
 * plainly well-formed.
 *
 * It vouches, it does not judge: null sends the record to the full validation (ingest/decode.py's
 * variant path), which names what is wrong. So every doubt gives null: text that does not start with
 * an object, anything strict JSON does not allow, text after the object, a declared field given
 * twice or of another JSON kind (an integer field holding 1.5, a string field holding 12), an
 * integer beyond a long, a number beyond a double, a backslash-u escape (which the variant parser
 * judges: it refuses a lone surrogate), bytes that are not well-formed UTF-8. A field that is
 * absent or JSON null is a null column; fields not declared are validated and skipped.
 *
 * The record is read in one pass of its bytes (FlatJsonReader), which also checks its UTF-8: a
 * general parser builds tokens, names and number objects an event's few fields do not need, and
 * Spark's from_json reads a record through a new InputStreamReader, whose 8 KB buffer and char
 * decoding cost more than the parse of a small event. The expression is Spark's Invoke of parse on
 * this object, so generated code calls it directly.
 */
public final class JsonFields implements Serializable {
    private static final long serialVersionUID = 1L;

    /** What a field's column holds. */
    private enum Kind { LONG, DOUBLE, STRING, BOOLEAN }

    private final String[] names;
    private final String[] types;
    private final Kind[] kinds;
    /** Each name's UTF-8 bytes, compared with a member's name as it stands in the record. */
    private final byte[][] nameBytes;
    private final StructType schema;

    /** names and types: one per field; types "long", "double", "string" or "boolean". */
    public JsonFields(String[] names, String[] types) {
        if (names.length != types.length) {
            throw new IllegalArgumentException(names.length + " field names but " + types.length + " types");
        }
        this.names = names.clone();
        this.types = types.clone();
        this.kinds = new Kind[names.length];
        this.nameBytes = new byte[names.length][];
        StructField[] fields = new StructField[names.length];
        for (int i = 0; i < names.length; i++) {
            kinds[i] = kind(types[i]);
            fields[i] = DataTypes.createStructField(names[i], sparkType(kinds[i]), true);
            nameBytes[i] = names[i].getBytes(StandardCharsets.UTF_8);
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
        FlatJsonReader in = new FlatJsonReader(bytes);
        Object[] values = new Object[nameBytes.length];
        boolean[] seen = new boolean[nameBytes.length];
        try {
            in.expect('{');
            if (!in.consume('}')) {
                do {
                    int field = in.name(nameBytes);
                    if (field < 0) {
                        in.skipValue();
                        continue;
                    }
                    if (seen[field]) {
                        return null;
                    }
                    seen[field] = true;
                    values[field] = read(in, kinds[field]);
                } while (in.nextMember());
            }
            in.end();
        } catch (FlatJsonReader.NotPlain e) {
            return null;
        }
        return new GenericInternalRow(values);
    }

    /** A value of the field's kind (null for JSON null); another JSON kind or out of range throws. */
    private static Object read(FlatJsonReader in, Kind kind) {
        switch (kind) {
            case LONG: return in.readLong();
            case DOUBLE: return in.readDouble();
            case STRING: return in.readString();
            default: return in.readBoolean();
        }
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
