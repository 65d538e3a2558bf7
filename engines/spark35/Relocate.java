import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.Enumeration;
import java.util.HashSet;
import java.util.Set;
import java.util.jar.Attributes;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;
import java.util.jar.JarOutputStream;
import java.util.jar.Manifest;

import org.apache.xbean.asm9.ClassReader;
import org.apache.xbean.asm9.ClassWriter;
import org.apache.xbean.asm9.Opcodes;
import org.apache.xbean.asm9.commons.ClassRemapper;
import org.apache.xbean.asm9.commons.Remapper;

/**
 * Writes the classes the Iceberg Spark runtime expects under its relocated packages:
 * {@code java Relocate OUT.jar IN.jar...} moves {@code com.fasterxml.jackson} and
 * {@code org.apache.hc} (class references, class-name strings, service files) under
 * {@code org.apache.iceberg.shaded}, as the runtime's own build does, and adds the empty
 * {@code TlsSocketStrategy} interface of httpclient5 5.4+ that the REST client names but only
 * uses for custom TLS.
 */
public final class Relocate {
    private static final String PREFIX = "org/apache/iceberg/shaded/";
    private static final String[] PACKAGES = {"com/fasterxml/jackson/", "org/apache/hc/"};

    static String relocate(String name) {
        for (String p : PACKAGES) {
            if (name.startsWith(p)) return PREFIX + name;
            String dotted = p.replace('/', '.');
            if (name.startsWith(dotted)) return PREFIX.replace('/', '.') + name;
        }
        return name;
    }

    public static void main(String[] args) throws IOException {
        Remapper remapper = new Remapper() {
            @Override public String map(String internalName) {
                return relocate(internalName);
            }
            @Override public Object mapValue(Object value) {
                return value instanceof String ? relocate((String) value) : super.mapValue(value);
            }
        };
        Manifest manifest = new Manifest();
        manifest.getMainAttributes().put(Attributes.Name.MANIFEST_VERSION, "1.0");
        Set<String> written = new HashSet<>();
        try (JarOutputStream out = new JarOutputStream(new FileOutputStream(args[0]), manifest)) {
            for (int i = 1; i < args.length; i++) {
                try (JarFile in = new JarFile(args[i])) {
                    for (Enumeration<JarEntry> e = in.entries(); e.hasMoreElements(); ) {
                        JarEntry entry = e.nextElement();
                        String name = entry.getName();
                        if (entry.isDirectory() || name.startsWith("META-INF/versions/")
                                || name.endsWith("module-info.class")
                                || (name.startsWith("META-INF/") && !name.startsWith("META-INF/services/"))) {
                            continue;
                        }
                        byte[] bytes;
                        try (InputStream stream = in.getInputStream(entry)) {
                            bytes = stream.readAllBytes();
                        }
                        if (name.endsWith(".class")) {
                            ClassWriter writer = new ClassWriter(0);
                            new ClassReader(bytes).accept(new ClassRemapper(writer, remapper), 0);
                            bytes = writer.toByteArray();
                            name = relocate(name);
                        } else if (name.startsWith("META-INF/services/")) {
                            String service = name.substring("META-INF/services/".length());
                            name = "META-INF/services/" + relocate(service);
                            StringBuilder lines = new StringBuilder();
                            for (String line : new String(bytes, StandardCharsets.UTF_8).split("\n")) {
                                lines.append(relocate(line.trim())).append('\n');
                            }
                            bytes = lines.toString().getBytes(StandardCharsets.UTF_8);
                        } else {
                            name = relocate(name);
                        }
                        if (written.add(name)) {
                            out.putNextEntry(new JarEntry(name));
                            out.write(bytes);
                            out.closeEntry();
                        }
                    }
                }
            }
            ClassWriter stub = new ClassWriter(0);
            String tls = PREFIX + "org/apache/hc/client5/http/ssl/TlsSocketStrategy";
            stub.visit(Opcodes.V1_8, Opcodes.ACC_PUBLIC | Opcodes.ACC_INTERFACE | Opcodes.ACC_ABSTRACT,
                       tls, null, "java/lang/Object", null);
            stub.visitEnd();
            if (written.add(tls + ".class")) {
                out.putNextEntry(new JarEntry(tls + ".class"));
                out.write(stub.toByteArray());
                out.closeEntry();
            }
        }
    }
}
