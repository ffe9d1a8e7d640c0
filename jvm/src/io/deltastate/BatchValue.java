package io.deltastate;

import java.io.Serializable;

import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.objects.Invoke;
import org.apache.spark.sql.types.AbstractDataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.ObjectType;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A value one micro-batch gives every row it writes (its batch id, segment, write time), without
 * a literal in the generated code.
 *
 * Spark's code generation writes a long literal into the generated source itself, so a plan whose
 * projection carries the batch id is new source every batch: Janino compiles it again, and the JIT
 * never sees the same class twice, so the batch's generated code runs interpreted. Here the value
 * is an object the generated code reads from its references array (as it reads string literals):
 * the source is the same every batch, Spark's code cache returns the compiled class, and only the
 * referenced value changes. The expression is marked non-deterministic so that the optimizer does
 * not fold it back into a literal.
 */
public final class BatchValue implements Serializable {
    private static final long serialVersionUID = 1L;

    private final long value;

    private BatchValue(long value) {
        this.value = value;
    }

    /** The value; called by the generated code. */
    public long value() {
        return value;
    }

    /** The expression for a foldable long argument (a literal): the same value, read by reference. */
    public static Expression of(Expression argument) {
        if (!argument.foldable() || !argument.dataType().equals(DataTypes.LongType)) {
            throw new IllegalArgumentException(
                    "a batch value is a long literal, not " + argument.sql() + " (" + argument.dataType().simpleString() + ")");
        }
        Object evaluated = argument.eval(null);
        if (evaluated == null) {
            throw new IllegalArgumentException("a batch value is not null");
        }
        Seq<Expression> noArgs = CollectionConverters.asScala(java.util.List.<Expression>of()).toList();
        Seq<AbstractDataType> noTypes = CollectionConverters.asScala(java.util.List.<AbstractDataType>of()).toList();
        return new Invoke(new Literal(new BatchValue((Long) evaluated), new ObjectType(BatchValue.class)), "value",
                DataTypes.LongType, noArgs, noTypes, false, false, false);
    }
}
