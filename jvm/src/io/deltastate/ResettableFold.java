package io.deltastate;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;

import org.apache.spark.sql.catalyst.expressions.Add;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.Cast;
import org.apache.spark.sql.catalyst.expressions.Coalesce;
import org.apache.spark.sql.catalyst.expressions.CreateNamedStruct;
import org.apache.spark.sql.catalyst.expressions.EvalMode$;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GreaterThan;
import org.apache.spark.sql.catalyst.expressions.GreaterThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.Greatest;
import org.apache.spark.sql.catalyst.expressions.If;
import org.apache.spark.sql.catalyst.expressions.IsNull;
import org.apache.spark.sql.catalyst.expressions.Least;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.NumericEvalContext;
import org.apache.spark.sql.catalyst.expressions.Or;
import org.apache.spark.sql.catalyst.expressions.aggregate.DeclarativeAggregate;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;

import scala.Option;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A key's state as an ordered fold that restarts at every tombstone, expressed as mergeable partials
 * so that Spark's native streaming aggregation (and its RocksDB state store) can keep it.
 *
 * Input columns: pos (long, the record's source offset; one key lives in one partition, so offsets
 * order a key's records; null for a record the fold must ignore, such as a dead letter), reset
 * (boolean, true for a tombstone), then one value column per slot.
 * A partial covers a contiguous range of positions [first_pos, last_pos]. Merging two partials keeps
 * the later one alone when it holds a tombstone, and combines both otherwise, so the result does not
 * depend on which partial Spark hands over first. A record enters as the partial of its one position.
 *
 * Each slot is given how two partial values combine, earlier then later: "add", "min", "max" or
 * "latest" (the later value when it has one). Which combine an aggregation op uses, and what an event
 * contributes (count's 1), is declared once in deltastate/stores/ops.py; this class knows no op names.
 * A null value is absent: it leaves the other side as it is. A restored state enters as one record
 * at a position before every offset (-1) whose count slot carries the state's count.
 * The result struct: reset_pos (-1 when the key never saw a tombstone), last_pos, n (records since
 * the last tombstone), then one field per slot, null when n = 0.
 *
 * The fold is a declarative aggregate (Catalyst expressions for its update and merge), so Spark
 * generates one class for the whole aggregation stage instead of interpreting it row by row. Its
 * buffer (first_pos, last_pos, reset_pos, n, s0..) is what the streaming aggregation keeps in its
 * state store, with the names, types and nullability a store's existing checkpoint holds.
 */
public final class ResettableFold extends DeclarativeAggregate {
    private static final long serialVersionUID = 2L;
    private static final int FIRST = 0, LAST = 1, RESET = 2, N = 3, SLOTS = 4;

    private final Seq<Expression> children;
    private final String combineList;
    private final String typeList;
    private final String[] combines;
    private final DataType[] types;
    private final List<AttributeReference> buffer;
    private transient Seq<Expression> updates, merges;

    /** children: pos, reset, then one value per slot; combines and types: comma-separated, one per slot. */
    public ResettableFold(Seq<Expression> children, String combineList, String typeList) {
        this.combineList = combineList;
        this.typeList = typeList;
        this.combines = combineList.split(",");
        String[] typeNames = typeList.split(",");
        if (combines.length != typeNames.length) {
            throw new IllegalArgumentException("combines and types differ in length");
        }
        this.types = new DataType[typeNames.length];
        for (int i = 0; i < combines.length; i++) {
            switch (combines[i]) {
                case "add": case "min": case "max": case "latest": break;
                default: throw new IllegalArgumentException("unknown fold combine " + combines[i]);
            }
            types[i] = typeOf(typeNames[i]);
        }
        List<Expression> given = CollectionConverters.asJava(children);
        if (given.size() != 2 + combines.length) {
            throw new IllegalArgumentException("the fold takes pos, reset and " + combines.length
                    + " values; got " + given.size() + " arguments");
        }
        List<Expression> typed = new ArrayList<>();
        typed.add(castTo(given.get(0), DataTypes.LongType));
        typed.add(castTo(given.get(1), DataTypes.BooleanType));
        for (int i = 0; i < combines.length; i++) {
            typed.add(castTo(given.get(2 + i), types[i]));
        }
        this.children = seq(typed);
        this.buffer = new ArrayList<>();
        buffer.add(attribute("first_pos", DataTypes.LongType, true));
        buffer.add(attribute("last_pos", DataTypes.LongType, true));
        buffer.add(attribute("reset_pos", DataTypes.LongType, false));
        buffer.add(attribute("n", DataTypes.LongType, false));
        for (int i = 0; i < combines.length; i++) {
            buffer.add(attribute("s" + i, types[i], true));
        }
    }

    private static DataType typeOf(String name) {
        switch (name) {
            case "long": return DataTypes.LongType;
            case "double": return DataTypes.DoubleType;
            case "string": return DataTypes.StringType;
            default: throw new IllegalArgumentException("unsupported fold type " + name);
        }
    }

    private static Expression castTo(Expression e, DataType type) {
        return e.resolved() && e.dataType().equals(type) ? e : new Cast(e, type, Option.empty());
    }

    private static AttributeReference attribute(String name, DataType type, boolean nullable) {
        return new AttributeReference(name, type, nullable, Metadata.empty(), NamedExpression.newExprId(),
                seq(new ArrayList<String>()));
    }

    private static <T> Seq<T> seq(List<T> items) {
        return CollectionConverters.asScala(items).toSeq();
    }

    private static Literal longLit(long v) {
        return Literal.create(v, DataTypes.LongType);
    }

    // ---- the fold as expressions ----

    /**
     * The merge of two partials a (the buffer) and b (the other), field by field. An empty partial
     * (no position: first_pos null, reset_pos -1, n 0, no values) is the identity, so no field needs
     * its own emptiness test; the two conditions every field shares (which side is later, whether the
     * later side holds a tombstone) are evaluated once per row by the generated code.
     */
    private List<Expression> merged(List<Expression> a, List<Expression> b) {
        Expression bLater = new If(new IsNull(a.get(FIRST)), Literal.create(true, DataTypes.BooleanType),
                new Coalesce(seq(Arrays.asList(new GreaterThan(b.get(FIRST), a.get(LAST)),
                        Literal.create(false, DataTypes.BooleanType)))));
        Expression lateResets = new GreaterThanOrEqual(new If(bLater, b.get(RESET), a.get(RESET)), longLit(0));
        List<Expression> out = new ArrayList<>();
        // Partials cover disjoint ranges of positions, so the later tombstone is the larger position.
        out.add(new Least(seq(Arrays.asList(a.get(FIRST), b.get(FIRST)))));
        out.add(new Greatest(seq(Arrays.asList(a.get(LAST), b.get(LAST)))));
        out.add(new Greatest(seq(Arrays.asList(a.get(RESET), b.get(RESET)))));
        out.add(new If(lateResets, new If(bLater, b.get(N), a.get(N)), add(a.get(N), b.get(N))));
        for (int i = 0; i < combines.length; i++) {
            Expression x = a.get(SLOTS + i), y = b.get(SLOTS + i);
            out.add(new If(lateResets, new If(bLater, y, x), combine(i, bLater, x, y)));
        }
        return out;
    }

    /** Slot i's values of partials a and b combined, in position order; nulls are absent values. */
    private Expression combine(int i, Expression bLater, Expression a, Expression b) {
        switch (combines[i]) {
            case "latest":
                return new If(bLater, new Coalesce(seq(Arrays.asList(b, a))), new Coalesce(seq(Arrays.asList(a, b))));
            case "add": return new Coalesce(seq(Arrays.asList(add(a, b), a, b)));
            case "min": return new Least(seq(Arrays.asList(a, b)));  // least/greatest skip nulls
            case "max": return new Greatest(seq(Arrays.asList(a, b)));
            default: throw new IllegalStateException(combines[i]);
        }
    }

    /** Addition that wraps on overflow, as Java's does: a state that overflows never fails its batch. */
    private static Expression add(Expression a, Expression b) {
        return new Add(a, b, NumericEvalContext.apply(EvalMode$.MODULE$.LEGACY(), false));
    }

    /** A record as a partial of its one position; a record without one (a dead letter) as the empty partial. */
    private List<Expression> recordPartial() {
        List<Expression> in = CollectionConverters.asJava(children);
        Expression pos = in.get(0);
        Expression reset = new Coalesce(seq(Arrays.asList(in.get(1), Literal.create(false, DataTypes.BooleanType))));
        Expression noValue = new Or(new IsNull(pos), reset);
        List<Expression> p = new ArrayList<>();
        p.add(pos);
        p.add(pos);
        p.add(new If(reset, new Coalesce(seq(Arrays.asList(pos, longLit(-1)))), longLit(-1)));
        p.add(new If(noValue, longLit(0), longLit(1)));
        for (int i = 0; i < combines.length; i++) {
            p.add(new If(noValue, Literal.create(null, types[i]), in.get(2 + i)));
        }
        return p;
    }

    private List<Expression> bufferExprs() {
        return new ArrayList<>(buffer);
    }

    @Override
    public Seq<AttributeReference> aggBufferAttributes() {
        return seq(buffer);
    }

    @Override
    public Seq<Expression> initialValues() {
        List<Expression> v = new ArrayList<>();
        v.add(Literal.create(null, DataTypes.LongType));
        v.add(Literal.create(null, DataTypes.LongType));
        v.add(longLit(-1));
        v.add(longLit(0));
        for (DataType t : types) {
            v.add(Literal.create(null, t));
        }
        return seq(v);
    }

    @Override
    public Seq<Expression> updateExpressions() {
        if (updates == null) {
            updates = seq(merged(bufferExprs(), recordPartial()));
        }
        return updates;
    }

    @Override
    public Seq<Expression> mergeExpressions() {
        if (merges == null) {
            List<Expression> right = new ArrayList<>(CollectionConverters.asJava(inputAggBufferAttributes()));
            merges = seq(merged(bufferExprs(), right));
        }
        return merges;
    }

    @Override
    public Expression evaluateExpression() {
        List<Expression> fields = new ArrayList<>();
        fields.add(Literal.create("reset_pos", DataTypes.StringType));
        fields.add(buffer.get(RESET));
        fields.add(Literal.create("last_pos", DataTypes.StringType));
        fields.add(buffer.get(LAST));
        fields.add(Literal.create("n", DataTypes.StringType));
        fields.add(buffer.get(N));
        for (int i = 0; i < combines.length; i++) {
            fields.add(Literal.create("r" + i, DataTypes.StringType));
            fields.add(buffer.get(SLOTS + i));
        }
        return new CreateNamedStruct(seq(fields));
    }

    @Override
    public DataType dataType() {
        return evaluateExpression().dataType();
    }

    @Override
    public boolean nullable() {
        return false;
    }

    @Override
    public Seq<Expression> children() {
        return children;
    }

    @Override
    public Expression withNewChildrenInternal(IndexedSeq<Expression> newChildren) {
        return new ResettableFold(newChildren.toSeq(), combineList, typeList);
    }

    @Override
    public String prettyName() {
        return "deltastate_fold";
    }

    // A case class's product: Catalyst copies an expression through its constructor's arguments.
    @Override
    public int productArity() {
        return 3;
    }

    @Override
    public Object productElement(int n) {
        switch (n) {
            case 0: return children;
            case 1: return combineList;
            case 2: return typeList;
            default: throw new IndexOutOfBoundsException(String.valueOf(n));
        }
    }

    @Override
    public boolean canEqual(Object that) {
        return that instanceof ResettableFold;
    }

    @Override
    public boolean equals(Object o) {
        if (!(o instanceof ResettableFold)) {
            return false;
        }
        ResettableFold other = (ResettableFold) o;
        return combineList.equals(other.combineList) && typeList.equals(other.typeList)
                && children.equals(other.children);
    }

    @Override
    public int hashCode() {
        return Objects.hash(combineList, typeList, children);
    }
}
